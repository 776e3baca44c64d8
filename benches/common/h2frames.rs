//! Raw HTTP/2 (RFC 9113) and HPACK (RFC 7541) bytes, for clients that
//! misbehave on purpose: the hostage bench's attackers and the webhook
//! tests. Shared by `#[path]` from both.

#![allow(dead_code)] // each includer uses its own part of it

/// RFC 9113 §4.1: a frame's 9-byte header and its payload.
pub(crate) fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let len = u32::try_from(payload.len()).unwrap().to_be_bytes();
    let mut out = vec![len[1], len[2], len[3], kind, flags];
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(payload);
    out
}

/// The client preface and an empty SETTINGS frame.
pub(crate) fn preface() -> Vec<u8> {
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    out.extend(frame(4, 0, 0, &[]));
    out
}

/// HPACK (RFC 7541) for `POST /mutate` at `localhost` over https, from the
/// static table: :method POST (3), :scheme https (7), and literals with
/// indexed names for :path (4) and :authority (1).
pub(crate) fn post_mutate_headers() -> Vec<u8> {
    let mut out = vec![0x83, 0x87, 0x04, 7];
    out.extend_from_slice(b"/mutate");
    out.extend_from_slice(&[0x01, 9]);
    out.extend_from_slice(b"localhost");
    out
}

/// The start of a header block that cannot be decoded until more comes:
/// a literal whose name is declared 1 000 000 bytes long, then `fill`
/// bytes of it.
pub(crate) fn unfinished_block(fill: usize) -> Vec<u8> {
    let mut out = vec![0x00, 0x7f];
    let mut rest = 1_000_000 - 127;
    while rest >= 128 {
        out.push((rest % 128) as u8 | 0x80);
        rest /= 128;
    }
    out.push(rest as u8);
    out.resize(out.len() + fill, b'a');
    out
}
