//! A definition's texts (paths, intrinsic calls) parsed once a thread: a state's
//! every visit evaluates the same few texts, and parsing one costs more than finding
//! it parsed.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::thread::LocalKey;

/// The most texts a thread keeps parsed of one kind; past it, its memo starts again.
const KEPT: usize = 4096;

/// Texts of one kind, parsed.
pub(crate) type Memo<T> = RefCell<HashMap<Box<str>, Rc<T>>>;

/// `text` parsed by `parse`, once while `memo` keeps it. A text that does not parse
/// is not kept: a definition holding one is refused when it is registered.
pub(crate) fn parsed<T>(
    memo: &'static LocalKey<Memo<T>>,
    text: &str,
    parse: impl FnOnce(&str) -> Result<T, String>,
) -> Result<Rc<T>, String> {
    if let Some(found) = memo.with_borrow(|kept| kept.get(text).cloned()) {
        return Ok(found);
    }
    let value = Rc::new(parse(text)?);
    memo.with_borrow_mut(|kept| {
        if kept.len() >= KEPT {
            kept.clear();
        }
        kept.insert(text.into(), Rc::clone(&value));
    });
    Ok(value)
}
