//! Webhook config text → `Config::from_yaml`: never panics (the config is
//! re-read on every change of the mounted file); an accepted config written
//! back out as JSON (a YAML document) reads back to the same config.
#![no_main]

use dljob::config::Config;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(config) = Config::from_yaml(text) else {
        return;
    };
    let json = serde_json::to_string(&config).expect("a Config serialises");
    let again = Config::from_yaml(&json)
        .unwrap_or_else(|e| panic!("{json} (from {text:?}) does not read back: {e}"));
    assert_eq!(again, config, "{text:?} → {json}");
});
