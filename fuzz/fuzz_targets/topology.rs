//! `dljob.dev/replicas` text → `Topology::parse`: never panics; a parsed
//! topology prints (Display) to text that parses back to the same topology,
//! and its accessors agree with each other.
#![no_main]

use dljob::contract::{is_dns1035_label, Topology};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(topology) = Topology::parse(text) else {
        return;
    };
    let shown = topology.to_string();
    let again = Topology::parse(&shown)
        .unwrap_or_else(|e| panic!("{shown:?} (from {text:?}) does not parse again: {e}"));
    assert_eq!(again, topology, "{text:?} → {shown:?}");
    assert!(again.same_as(&topology));
    let mut sum: u64 = 0;
    for (role, n) in topology.roles() {
        assert!(is_dns1035_label(role), "role {role:?}");
        assert!(n >= 1, "role {role:?} has count 0");
        assert_eq!(topology.count(role), Some(n));
        sum += u64::from(n);
    }
    assert_eq!(u64::from(topology.total()), sum, "total of {shown:?}");
});
