//! An intrinsic function call's text parsed: `States.Name(arg, ...)`.

use serde_json::Value;

use super::{Arg, Call, Function, MAX_NESTING};
use crate::path;

/// Parses a call, checking what the definition can show: the syntax, that the
/// function exists, its argument count, the paths in it and how deeply calls nest.
pub fn parse(text: &str) -> Result<Call, String> {
    let mut parser = Parser { text, at: 0 };
    let call = parser.call(1)?;
    parser.skip_blanks();
    match parser.rest() {
        "" => Ok(call),
        rest => Err(format!("unexpected text after the call: '{rest}'")),
    }
}

struct Parser<'a> {
    text: &'a str,
    /// A byte offset into `text`, always at a character boundary.
    at: usize,
}

impl<'a> Parser<'a> {
    fn rest(&self) -> &'a str {
        self.text.get(self.at..).unwrap_or_default()
    }

    fn skip_blanks(&mut self) {
        let rest = self.rest();
        self.at += rest.len() - rest.trim_start().len();
    }

    fn eat(&mut self, c: char) -> bool {
        let found = self.rest().starts_with(c);
        if found {
            self.at += c.len_utf8();
        }
        found
    }

    fn call(&mut self, depth: usize) -> Result<Call, String> {
        if depth > MAX_NESTING {
            return Err(format!(
                "intrinsic functions nest more than {MAX_NESTING} deep"
            ));
        }
        let rest = self.rest();
        let name = &rest[..rest
            .find('(')
            .ok_or("expected '(' after the function name")?];
        let function =
            Function::from_name(name).ok_or_else(|| format!("unknown function '{name}'"))?;
        self.at += name.len() + 1;
        let mut args = Vec::new();
        self.skip_blanks();
        if !self.eat(')') {
            loop {
                args.push(self.arg(depth)?);
                self.skip_blanks();
                if self.eat(')') {
                    break;
                }
                if !self.eat(',') {
                    return Err(format!("expected ',' or ')' in {name}"));
                }
                self.skip_blanks();
            }
        }
        let (fewest, most) = function.arity();
        if args.len() < fewest || most.is_some_and(|most| args.len() > most) {
            let count = match most {
                Some(most) if most == fewest => format!("{fewest}"),
                Some(most) => format!("{fewest} to {most}"),
                None => format!("at least {fewest}"),
            };
            return Err(format!(
                "{name} takes {count} arguments, not {}",
                args.len()
            ));
        }
        Ok(Call { function, args })
    }

    fn arg(&mut self, depth: usize) -> Result<Arg, String> {
        let rest = self.rest();
        if rest.starts_with("States.") {
            return Ok(Arg::Call(self.call(depth + 1)?));
        }
        if rest.starts_with('\'') {
            return self.text_literal();
        }
        if rest.starts_with('$') {
            return self.path();
        }
        let end = rest
            .find(|c: char| c == ',' || c == ')' || c.is_whitespace())
            .unwrap_or(rest.len());
        let token = &rest[..end];
        let value = match token {
            "true" => Value::Bool(true),
            "false" => Value::Bool(false),
            "null" => Value::Null,
            _ if token.starts_with(|c: char| c == '-' || c.is_ascii_digit()) => {
                match serde_json::from_str(token) {
                    Ok(number @ Value::Number(_)) => number,
                    _ => return Err(format!("'{token}' is not a number")),
                }
            }
            _ => return Err(format!("unexpected argument '{token}'")),
        };
        self.at += end;
        Ok(Arg::Literal(value))
    }

    /// `'...'`: only `\'`, `\{`, `\}` and `\\` may be escaped.
    fn text_literal(&mut self) -> Result<Arg, String> {
        let body = &self.rest()[1..];
        let mut value = String::new();
        let mut chars = body.char_indices();
        while let Some((at, c)) = chars.next() {
            match c {
                '\'' => {
                    self.at += 1 + at + 1;
                    let raw = body[..at].to_owned();
                    return Ok(Arg::Text { raw, value });
                }
                '\\' => match chars.next() {
                    Some((_, escaped @ ('\'' | '{' | '}' | '\\'))) => value.push(escaped),
                    Some((_, other)) => return Err(format!("illegal escape '\\{other}'")),
                    None => break,
                },
                other => value.push(other),
            }
        }
        Err("a string is not closed".to_owned())
    }

    /// A path argument: up to a `,`, `)` or blank outside brackets and quotes.
    fn path(&mut self) -> Result<Arg, String> {
        let rest = self.rest();
        let (mut depth, mut quoting) = (0usize, path::Quoting::default());
        let mut end = rest.len();
        for (at, c) in rest.char_indices() {
            if quoting.takes(c) {
                continue;
            }
            match c {
                '\'' | '"' if depth > 0 => quoting.open(c),
                '[' | '(' => depth += 1,
                ']' | ')' if depth > 0 => depth -= 1,
                ',' | ')' => {
                    end = at;
                    break;
                }
                c if c.is_whitespace() && depth == 0 => {
                    end = at;
                    break;
                }
                _ => {}
            }
        }
        let query = &rest[..end];
        path::Path::parse(query).map_err(|reason| format!("invalid path '{query}': {reason}"))?;
        self.at += end;
        Ok(Arg::Path(query.to_owned()))
    }
}
