//! A JSONPath as Step Functions reads it (Jayway's grammar): `$`, `$$` or `$name`, then
//! `.name`, `['name']`, `[0]`, `[*]`, `.*`, `[a:b]`, `[0,1]`, `['a','b']`, `[?(...)]`
//! and `..` before any of them.

use serde_json_path::JsonPath;

/// What a path starts from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Root {
    /// `$`: the state's input.
    Input,
    /// `$$`: the context object.
    Context,
    /// `$name`: an ASL variable.
    Variable(String),
}

#[derive(Clone, Debug)]
pub(super) enum Step {
    Name(String),
    /// `['a','b']`: as the last step of a definite path, one object of those fields.
    Names(Vec<String>),
    Index(i64),
    Indexes(Vec<i64>),
    Wildcard,
    Slice(Option<i64>, Option<i64>),
    /// `[?(...)]`, compiled as the RFC 9535 query `$[?(...)]`.
    Filter(Box<JsonPath>),
}

#[derive(Clone, Debug)]
pub(super) struct Segment {
    /// After `..`: the step applies to every value below, as well as the value itself.
    pub deep: bool,
    pub step: Step,
}

/// Parentheses and brackets a filter may nest: the filter grammar is parsed
/// recursively, so a bound keeps hostile paths from exhausting the stack.
const MAX_FILTER_NESTING: usize = 32;

pub(super) fn parse(text: &str) -> Result<(Root, Vec<Segment>), String> {
    let Some(rest) = text.strip_prefix('$') else {
        return Err("a path starts with '$'".to_owned());
    };
    let (root, mut rest) = if let Some(rest) = rest.strip_prefix('$') {
        (Root::Context, rest)
    } else if rest.starts_with(|c: char| c.is_alphabetic() || c == '_') {
        let end = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        (Root::Variable(rest[..end].to_owned()), &rest[end..])
    } else {
        (Root::Input, rest)
    };
    let mut segments = Vec::new();
    while !rest.is_empty() {
        let (deep, after) = if let Some(after) = rest.strip_prefix("..") {
            (true, after)
        } else if let Some(after) = rest.strip_prefix('.') {
            (false, after)
        } else if rest.starts_with('[') {
            (false, rest)
        } else {
            return Err(format!("unexpected text '{rest}'"));
        };
        let (step, after) = if after.starts_with('[') {
            bracket(after)?
        } else if let Some(after) = after.strip_prefix('*') {
            (Step::Wildcard, after)
        } else {
            dot_name(after)?
        };
        segments.push(Segment { deep, step });
        rest = after;
    }
    Ok((root, segments))
}

/// A name after `.`: everything up to the next `.` or `[` (so `$.a-b` and `$.a:b` are
/// names), but no blanks, as in Jayway.
fn dot_name(text: &str) -> Result<(Step, &str), String> {
    let end = text.find(['.', '[']).unwrap_or(text.len());
    let name = &text[..end];
    if name.is_empty() {
        return Err("a name is missing after '.'".to_owned());
    }
    if name.contains(char::is_whitespace) {
        return Err(format!("the name '{name}' has blanks: use ['{name}']"));
    }
    Ok((Step::Name(name.to_owned()), &text[end..]))
}

/// `[...]` at the start of `text`: its step and what follows it.
fn bracket(text: &str) -> Result<(Step, &str), String> {
    let (inside, nesting, rest) = split_bracket(text)?;
    let inside = inside.trim();
    let step = if let Some(filter) = inside.strip_prefix('?') {
        if nesting > MAX_FILTER_NESTING {
            return Err("the filter nests too deeply".to_owned());
        }
        let query = JsonPath::parse(&format!("$[?{filter}]"))
            .map_err(|error| format!("invalid filter '{inside}': {error}"))?;
        Step::Filter(Box::new(query))
    } else if inside == "*" {
        Step::Wildcard
    } else if inside.starts_with(['\'', '"']) {
        let mut names = quoted_names(inside)?;
        if names.len() == 1 {
            Step::Name(names.remove(0))
        } else {
            Step::Names(names)
        }
    } else if let Some((from, to)) = inside.split_once(':') {
        Step::Slice(bound(from)?, bound(to)?)
    } else {
        let mut indexes = inside
            .split(',')
            .map(|index| integer(index.trim()))
            .collect::<Result<Vec<_>, _>>()?;
        if indexes.len() == 1 {
            Step::Index(indexes.remove(0))
        } else {
            Step::Indexes(indexes)
        }
    };
    Ok((step, rest))
}

/// Splits `[...]rest` into the text inside the brackets, how deeply brackets and
/// parentheses nest in it, and the rest. Quotes hide brackets; a backslash in quotes
/// hides the next character.
fn split_bracket(text: &str) -> Result<(&str, usize, &str), String> {
    let (mut depth, mut nesting, mut quoting) = (0usize, 0usize, Quoting::default());
    for (at, c) in text.char_indices().skip(1) {
        if quoting.takes(c) {
            continue;
        }
        match c {
            '\'' | '"' => quoting.open(c),
            '[' | '(' => {
                depth += 1;
                nesting = nesting.max(depth);
            }
            ')' => depth = depth.saturating_sub(1),
            ']' if depth == 0 => return Ok((&text[1..at], nesting, &text[at + 1..])),
            ']' => depth -= 1,
            _ => {}
        }
    }
    Err("a '[' is not closed".to_owned())
}

/// Where a scan of text stands with its quotes: a quote opens a string and the same
/// quote closes it; a backslash in it hides the next character.
#[derive(Default)]
pub(crate) struct Quoting {
    open: Option<char>,
    escaped: bool,
}

impl Quoting {
    /// Takes `c`, the next character: whether it is inside a string (its closing
    /// quote included), which a scan then passes over.
    pub(crate) fn takes(&mut self, c: char) -> bool {
        let Some(open) = self.open else {
            return false;
        };
        if self.escaped {
            self.escaped = false;
        } else if c == '\\' {
            self.escaped = true;
        } else if c == open {
            self.open = None;
        }
        true
    }

    /// A string opens with the quote `c`.
    pub(crate) fn open(&mut self, c: char) {
        self.open = Some(c);
    }
}

/// `'a'` or `'a', "b"`. A backslash keeps the next character inside the name but
/// stays in it too: Step Functions looks up `$['a\"b']` as the key `a\"b`.
fn quoted_names(text: &str) -> Result<Vec<String>, String> {
    let mut names = Vec::new();
    let mut rest = text;
    loop {
        let mut chars = rest.char_indices();
        let Some((_, open @ ('\'' | '"'))) = chars.next() else {
            return Err(format!("expected a quoted name in [{text}]"));
        };
        let mut escaped = false;
        let close = chars.find(|&(_, c)| {
            let closes = !escaped && c == open;
            escaped = !escaped && c == '\\';
            closes
        });
        let Some((close, _)) = close else {
            return Err(format!("a quote is not closed in [{text}]"));
        };
        names.push(rest[1..close].to_owned());
        rest = rest[close + 1..].trim_start();
        if rest.is_empty() {
            return Ok(names);
        }
        let Some(next) = rest.strip_prefix(',') else {
            return Err(format!("expected ',' or ']' in [{text}]"));
        };
        rest = next.trim_start();
    }
}

fn bound(text: &str) -> Result<Option<i64>, String> {
    let text = text.trim();
    if text.is_empty() {
        Ok(None)
    } else {
        integer(text).map(Some)
    }
}

fn integer(text: &str) -> Result<i64, String> {
    text.parse()
        .map_err(|_| format!("'{text}' is not an array index"))
}
