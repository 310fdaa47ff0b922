//! Fuzz target: the workspace record reader (`cordon_git::Carried::decode`), whose bytes come from
//! the store and whose objects came from a hostile work tree. Properties checked on every input:
//! no panic; a record it accepts holds at most `MAX_CARRIED_OBJECTS` objects, and writes back to
//! bytes that read as the same record.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(carried) = cordon_git::Carried::decode(data) else {
        return;
    };
    assert!(carried.object_count() <= cordon_git::MAX_CARRIED_OBJECTS);
    let again = cordon_git::Carried::decode(&carried.encode()).expect("its own bytes read back");
    assert_eq!(again, carried);
});
