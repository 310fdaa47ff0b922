//! Fuzz target: the egress proxy's request-head path — the `httparse` tokenizer as the proxy
//! drives it, the body framing rules (where request smuggling lives) and the rewrite of an
//! absolute-form head into the origin-form head sent upstream. Properties (asserted inside
//! `cordon_egress::proxy::fuzz_request_head`): no panic; the rewritten head parses back as exactly
//! one head with the same method, the origin-form path, one `Host` naming the checked authority,
//! no hop-by-hop or `Proxy-*` field, `Connection: close`, and the same body framing the proxy
//! used.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    cordon_egress::proxy::fuzz_request_head(data);
});
