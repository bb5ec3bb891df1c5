//! The cursor key's conformance ([`CursorKeyStore`]).

use sas_core::ports::CursorKeyStore;

/// The first key drawn for owners' cursors is the one every caller gets, those who
/// drew theirs at the same time included.
pub(super) async fn the_first_cursor_key_is_kept(store: &dyn CursorKeyStore) {
    let kept = tokio::join!(
        store.cursor_key([1; 32]),
        store.cursor_key([2; 32]),
        store.cursor_key([3; 32]),
        store.cursor_key([4; 32]),
    );
    let kept = [kept.0, kept.1, kept.2, kept.3].map(|key| key.expect("kept"));
    assert!(kept.iter().all(|key| *key == kept[0]), "{kept:?}");
    assert!((1..=4).any(|n| kept[0] == [n; 32]), "one of those drawn");
    assert_eq!(store.cursor_key([9; 32]).await.expect("read"), kept[0]);
}
