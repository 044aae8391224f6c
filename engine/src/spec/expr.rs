//! Conditions of `when`: `==`, `!=`, `<`, `<=`, `>`, `>=`, `&&`, `||`, `!`, parentheses,
//! numbers, quoted or bare strings and templates.
//!
//! The condition is parsed with its templates as operands (not by pasting values into text
//! and re-parsing), so a metric whose value has spaces or quotes cannot change the meaning
//! of the expression. Two operands compare as numbers when both read as numbers.

use super::template::{self, Ref, Scope, Template};

#[derive(Clone, Debug, PartialEq)]
pub enum Expr {
    /// A lone operand is true unless it is empty, `false` or `0`.
    Operand(Operand),
    Not(Box<Expr>),
    And(Box<Expr>, Box<Expr>),
    Or(Box<Expr>, Box<Expr>),
    Compare(Op, Operand, Operand),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl Op {
    /// The operator as written in a condition.
    pub fn symbol(self) -> &'static str {
        match self {
            Op::Eq => "==",
            Op::Ne => "!=",
            Op::Lt => "<",
            Op::Le => "<=",
            Op::Gt => ">",
            Op::Ge => ">=",
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub enum Operand {
    /// A quoted string: never a number, never templated.
    Quoted(String),
    /// A bare word, possibly with templates in it.
    Word(Template),
}

/// A syntax error at a byte offset of the condition.
#[derive(Clone, Debug, PartialEq)]
pub struct Error {
    pub offset: usize,
    pub message: String,
    pub help: Option<String>,
}

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    LParen,
    RParen,
    Not,
    And,
    Or,
    Op(Op),
    Quoted(String),
    /// A bare word as written, and its templates (offsets counted in the whole condition).
    Word(String, Template),
}

/// Splits the condition into tokens, going on past characters that cannot start one, so
/// that every such mistake is reported; a quote never closed ends it.
fn lex(text: &str, scope: Scope<'_>) -> Lexed {
    let mut lexed = Lexed::default();
    let b = text.as_bytes();
    let mut i = 0;
    let out = &mut lexed.toks;
    while i < b.len() {
        let c = b[i];
        let start = i;
        let two = text.get(i..i + 2).unwrap_or("");
        let tok = match c {
            b' ' | b'\t' | b'\n' | b'\r' => {
                i += 1;
                continue;
            }
            b'(' => Tok::LParen,
            b')' => Tok::RParen,
            _ if two == "&&" => Tok::And,
            _ if two == "||" => Tok::Or,
            _ if two == "==" => Tok::Op(Op::Eq),
            _ if two == "!=" => Tok::Op(Op::Ne),
            _ if two == "<=" => Tok::Op(Op::Le),
            _ if two == ">=" => Tok::Op(Op::Ge),
            b'<' => Tok::Op(Op::Lt),
            b'>' => Tok::Op(Op::Gt),
            b'!' => Tok::Not,
            b'=' | b'&' | b'|' => {
                let hint = match c {
                    b'=' => "compare with '=='",
                    b'&' => "write '&&' for 'and'",
                    _ => "write '||' for 'or'",
                };
                lexed.errors.push(Error {
                    offset: i,
                    message: format!("unexpected '{}' in condition", c as char),
                    help: Some(hint.into()),
                });
                i += 1;
                continue;
            }
            b'\'' | b'"' => {
                let Some(close) = text[i + 1..].find(c as char) else {
                    lexed.errors.push(Error {
                        offset: i,
                        message: "unclosed quote in condition".into(),
                        help: None,
                    });
                    break;
                };
                let s = text[i + 1..i + 1 + close].to_owned();
                i += close + 2;
                out.push((start, Tok::Quoted(s)));
                continue;
            }
            _ => {
                // A word runs to whitespace or an operator; `{{...}}` is taken whole.
                while i < b.len() {
                    // Bytes, not `text[i..]`: `i` may be inside a character such as 'é'.
                    if b[i..].starts_with(b"{{") {
                        match text[i..].find("}}") {
                            Some(j) => i += j + 2,
                            None => i = b.len(),
                        }
                        continue;
                    }
                    if matches!(
                        b[i],
                        b' ' | b'\t'
                            | b'\n'
                            | b'\r'
                            | b'('
                            | b')'
                            | b'!'
                            | b'='
                            | b'<'
                            | b'>'
                            | b'&'
                            | b'|'
                            | b'\''
                            | b'"'
                    ) {
                        break;
                    }
                    i += 1;
                }
                let word = &text[start..i];
                let (mut t, errors) = Template::parse_partial(word, scope);
                for part in &mut t.parts {
                    if let template::Part::Ref(r) = part {
                        r.offset += start;
                    }
                }
                lexed
                    .template_errors
                    .extend(errors.into_iter().map(|mut e| {
                        e.offset += start;
                        e
                    }));
                out.push((start, Tok::Word(word.to_owned(), t)));
                continue;
            }
        };
        i += match tok {
            Tok::And | Tok::Or | Tok::Op(Op::Eq | Op::Ne | Op::Le | Op::Ge) => 2,
            _ => 1,
        };
        out.push((start, tok));
    }
    lexed
}

#[derive(Default)]
struct Lexed {
    toks: Vec<(usize, Tok)>,
    errors: Vec<Error>,
    template_errors: Vec<template::Error>,
}

struct ParserState {
    toks: Vec<(usize, Tok)>,
    at: usize,
    len: usize,
}

impl ParserState {
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.at).map(|(_, t)| t)
    }

    fn offset(&self) -> usize {
        self.toks.get(self.at).map_or(self.len, |(o, _)| *o)
    }

    fn expr(&mut self) -> Result<Expr, Error> {
        let mut left = self.and()?;
        while self.peek() == Some(&Tok::Or) {
            self.at += 1;
            let right = self.and()?;
            left = Expr::Or(Box::new(left), Box::new(right));
        }
        Ok(left)
    }

    fn and(&mut self) -> Result<Expr, Error> {
        let mut left = self.unary()?;
        while self.peek() == Some(&Tok::And) {
            self.at += 1;
            let right = self.unary()?;
            left = Expr::And(Box::new(left), Box::new(right));
        }
        Ok(left)
    }

    fn unary(&mut self) -> Result<Expr, Error> {
        match self.peek() {
            Some(Tok::Not) => {
                self.at += 1;
                Ok(Expr::Not(Box::new(self.unary()?)))
            }
            Some(Tok::LParen) => {
                let open = self.offset();
                self.at += 1;
                let e = self.expr()?;
                if self.peek() != Some(&Tok::RParen) {
                    return Err(Error {
                        offset: open,
                        message: "'(' is never closed".into(),
                        help: Some("add the matching ')'".into()),
                    });
                }
                self.at += 1;
                Ok(e)
            }
            _ => {
                let left = self.operand()?;
                if let Some(Tok::Op(op)) = self.peek() {
                    let op = *op;
                    self.at += 1;
                    let right = self.operand()?;
                    return Ok(Expr::Compare(op, left, right));
                }
                Ok(Expr::Operand(left))
            }
        }
    }

    fn operand(&mut self) -> Result<Operand, Error> {
        let offset = self.offset();
        match self.toks.get(self.at).map(|(o, t)| (*o, t.clone())) {
            Some((_, Tok::Quoted(s))) => {
                self.at += 1;
                Ok(Operand::Quoted(s))
            }
            Some((_, Tok::Word(_, t))) => {
                self.at += 1;
                Ok(Operand::Word(t))
            }
            _ if offset >= self.len => {
                // Point at what was left dangling, not at the end of the string.
                let last = self.at.checked_sub(1).and_then(|i| self.toks.get(i));
                let (at, what) = last.map_or((0, String::new()), |(o, t)| (*o, describe(t)));
                Err(Error {
                    offset: at,
                    message: format!("the condition ends after {what} where a value was expected"),
                    help: Some(format!("add a value after {what}, or remove it")),
                })
            }
            _ => Err(Error {
                offset,
                message: "expected a value (a number, a string or a template) here".into(),
                help: None,
            }),
        }
    }
}

/// How a token is named in a syntax error.
fn describe(t: &Tok) -> String {
    match t {
        Tok::LParen => "'('".into(),
        Tok::RParen => "')'".into(),
        Tok::Not => "'!'".into(),
        Tok::And => "'&&'".into(),
        Tok::Or => "'||'".into(),
        Tok::Op(op) => format!("'{}'", op.symbol()),
        Tok::Quoted(s) => format!("{s:?}"),
        Tok::Word(w, _) => format!("'{w}'"),
    }
}

/// What parsing a condition gives: the expression or its syntax errors, the errors of its
/// templates (found in every word, whether or not the condition parses), and its words.
pub struct Parsed {
    /// The condition, or what is wrong with it: every character that starts no token, else
    /// the first syntax error.
    pub expr: Result<Expr, Vec<Error>>,
    pub template_errors: Vec<template::Error>,
    /// The bare words, in order, with the references that parsed in each: what a condition
    /// that does not parse still refers to.
    pub words: Vec<Template>,
}

pub fn parse(text: &str, scope: Scope<'_>) -> Parsed {
    let lexed = lex(text, scope);
    let words = lexed
        .toks
        .iter()
        .filter_map(|(_, t)| match t {
            Tok::Word(_, t) => Some(t.clone()),
            _ => None,
        })
        .collect();
    let template_errors = lexed.template_errors;
    if !lexed.errors.is_empty() {
        return Parsed {
            expr: Err(lexed.errors),
            template_errors,
            words,
        };
    }
    if lexed.toks.is_empty() {
        return Parsed {
            expr: Err(vec![Error {
                offset: 0,
                message: "empty condition".into(),
                help: Some(
                    "write a comparison such as \"{{steps.train.metrics.accuracy}} >= 0.9\"".into(),
                ),
            }]),
            template_errors,
            words,
        };
    }
    let mut p = ParserState {
        toks: lexed.toks,
        at: 0,
        len: text.len(),
    };
    let expr = p.expr().and_then(|e| {
        if p.at < p.toks.len() {
            let operand = |t: Option<&(usize, Tok)>| {
                matches!(t, Some((_, Tok::Word(..) | Tok::Quoted(_) | Tok::RParen)))
            };
            let two_values = operand(p.toks.get(p.at - 1)) && operand(p.toks.get(p.at));
            Err(Error {
                offset: p.offset(),
                message: "unexpected text after the end of the condition".into(),
                help: Some(if two_values {
                    "compare the two values with ==, !=, <, <=, > or >=".into()
                } else {
                    "join conditions with '&&' or '||'".into()
                }),
            })
        } else {
            Ok(e)
        }
    });
    Parsed {
        expr: expr.map_err(|e| vec![e]),
        template_errors,
        words,
    }
}

impl Expr {
    /// Every template reference in the condition.
    pub fn refs(&self) -> Vec<&template::RefAt> {
        let mut out = Vec::new();
        self.collect(&mut out);
        out
    }

    fn collect<'a>(&'a self, out: &mut Vec<&'a template::RefAt>) {
        let operand = |o: &'a Operand, out: &mut Vec<&'a template::RefAt>| {
            if let Operand::Word(t) = o {
                out.extend(t.refs());
            }
        };
        match self {
            Expr::Operand(o) => operand(o, out),
            Expr::Not(e) => e.collect(out),
            Expr::And(a, b) | Expr::Or(a, b) => {
                a.collect(out);
                b.collect(out);
            }
            Expr::Compare(_, a, b) => {
                operand(a, out);
                operand(b, out);
            }
        }
    }

    /// Evaluates the condition; `resolve` gives each reference's value as text.
    pub fn eval<E>(&self, resolve: &mut impl FnMut(&Ref) -> Result<String, E>) -> Result<bool, E> {
        Ok(match self {
            Expr::Operand(o) => truthy(&value(o, resolve)?),
            Expr::Not(e) => !e.eval(resolve)?,
            Expr::And(a, b) => a.eval(resolve)? && b.eval(resolve)?,
            Expr::Or(a, b) => a.eval(resolve)? || b.eval(resolve)?,
            Expr::Compare(op, a, b) => compare(*op, &value(a, resolve)?, &value(b, resolve)?),
        })
    }
}

impl Expr {
    /// The condition with each template replaced by its value (`0.93 >= 0.99`), to say why a
    /// step was skipped in the terms it was decided on.
    pub fn explain<E>(
        &self,
        resolve: &mut impl FnMut(&Ref) -> Result<String, E>,
    ) -> Result<String, E> {
        Ok(match self {
            Expr::Operand(o) => shown(o, resolve)?,
            Expr::Not(e) => format!("!({})", e.explain(resolve)?),
            Expr::And(a, b) => format!(
                "{} && {}",
                a.explain_nested(resolve)?,
                b.explain_nested(resolve)?
            ),
            Expr::Or(a, b) => format!(
                "{} || {}",
                a.explain_nested(resolve)?,
                b.explain_nested(resolve)?
            ),
            Expr::Compare(op, a, b) => {
                format!(
                    "{} {} {}",
                    shown(a, resolve)?,
                    op.symbol(),
                    shown(b, resolve)?
                )
            }
        })
    }

    /// As `explain`, in parentheses when it joins others.
    fn explain_nested<E>(
        &self,
        resolve: &mut impl FnMut(&Ref) -> Result<String, E>,
    ) -> Result<String, E> {
        let text = self.explain(resolve)?;
        Ok(match self {
            Expr::And(..) | Expr::Or(..) => format!("({text})"),
            _ => text,
        })
    }
}

/// An operand's value as the explanation shows it: quoted when it was quoted or is empty.
fn shown<E>(o: &Operand, resolve: &mut impl FnMut(&Ref) -> Result<String, E>) -> Result<String, E> {
    let v = value(o, resolve)?;
    Ok(match o {
        Operand::Quoted(_) => format!("'{v}'"),
        Operand::Word(_) if v.is_empty() || v.contains(char::is_whitespace) => format!("'{v}'"),
        Operand::Word(_) => v,
    })
}

fn value<E>(o: &Operand, resolve: &mut impl FnMut(&Ref) -> Result<String, E>) -> Result<String, E> {
    match o {
        Operand::Quoted(s) => Ok(s.clone()),
        Operand::Word(t) => t.render(|r| resolve(r)),
    }
}

fn truthy(v: &str) -> bool {
    !matches!(v.trim(), "" | "false" | "False" | "0") && (v.trim().parse::<f64>() != Ok(0.0))
}

fn compare(op: Op, a: &str, b: &str) -> bool {
    use std::cmp::Ordering;
    let ord = match (a.trim().parse::<f64>(), b.trim().parse::<f64>()) {
        (Ok(x), Ok(y)) => x.partial_cmp(&y),
        _ => Some(a.cmp(b)),
    };
    match (op, ord) {
        (Op::Eq, o) => o == Some(Ordering::Equal),
        (Op::Ne, o) => o != Some(Ordering::Equal),
        (Op::Lt, o) => o == Some(Ordering::Less),
        (Op::Le, o) => matches!(o, Some(Ordering::Less | Ordering::Equal)),
        (Op::Gt, o) => o == Some(Ordering::Greater),
        (Op::Ge, o) => matches!(o, Some(Ordering::Greater | Ordering::Equal)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eval(text: &str, acc: &str) -> bool {
        let e = parse(text, Scope::default()).expr.expect(text);
        let r: Result<bool, ()> = e.eval(&mut |_r| Ok(acc.to_owned()));
        r.expect("evaluates")
    }

    #[test]
    fn compares_numbers_as_numbers_and_words_as_text() {
        assert!(eval("{{steps.t.metrics.a}} >= 0.9", "0.91"));
        assert!(!eval("{{steps.t.metrics.a}} >= 0.9", "0.89"));
        assert!(eval("{{steps.t.metrics.a}} > 10", "9e1"));
        assert!(eval("{{params.split}} == val", "val"));
        assert!(eval("{{params.split}} != 'test'", "val"));
        assert!(eval("!({{params.x}} == a) || b == b", "a"));
        assert!(!eval("{{params.x}} && false", "true"));
        assert!(eval("{{params.x}}", "true"));
        assert!(!eval("{{params.x}}", "0"));
    }

    #[test]
    fn explains_a_condition_with_its_values() {
        let e = parse(
            "{{steps.t.metrics.a}} >= 0.99 && {{params.x}} != 'b'",
            Scope::default(),
        )
        .expr
        .expect("parses");
        let r: Result<String, ()> = e.explain(&mut |_r| Ok("0.93".to_owned()));
        assert_eq!(r.expect("explains"), "0.93 >= 0.99 && 0.93 != 'b'");
    }

    #[test]
    fn a_value_with_spaces_cannot_change_the_condition() {
        assert!(!eval("{{params.x}} == a", "a || b == b"));
    }

    #[test]
    fn reports_syntax_errors_with_offsets() {
        let first = |text: &str| {
            let mut e = parse(text, Scope::default()).expr.expect_err(text);
            assert_eq!(e.len(), 1, "{text}: {e:?}");
            e.remove(0)
        };
        assert_eq!(first("{{params.x}} = 3").offset, 13);
        assert_eq!(first("(a == b").message, "'(' is never closed");
        let e = first("a >=");
        assert_eq!(
            e.message,
            "the condition ends after '>=' where a value was expected"
        );
        assert_eq!(e.offset, 2);
        assert_eq!(first("a b").offset, 2);
        let p = parse("{{param.x}} > 1", Scope::default());
        assert_eq!(p.template_errors.len(), 1);
    }

    #[test]
    fn reports_every_stray_character_and_every_bad_template() {
        let p = parse(
            "{{inputs.parameters.lr}} = 1 & {{param.x}} == {{params.y}}",
            Scope::default(),
        );
        let offsets: Vec<usize> = p.expr.expect_err("bad").iter().map(|e| e.offset).collect();
        assert_eq!(offsets, vec![25, 29]);
        let bad: Vec<(usize, &str)> = p
            .template_errors
            .iter()
            .map(|e| (e.offset, e.raw.as_str()))
            .collect();
        assert_eq!(
            bad,
            vec![(0, "{{inputs.parameters.lr}}"), (31, "{{param.x}}")]
        );
        // The reference that parsed is kept, at its offset in the whole condition.
        let refs: Vec<(usize, String)> = p
            .words
            .iter()
            .flat_map(Template::refs)
            .map(|r| (r.offset, r.reference.to_string()))
            .collect();
        assert_eq!(refs, vec![(46, "params.y".to_owned())]);
    }

    #[test]
    fn words_may_hold_any_character() {
        assert!(eval("é == é", ""));
        assert!(eval("{{params.x}} == ünï", "ünï"));
        let p = parse("é{{params.é}} = ü & ö \"open", Scope::default());
        let offsets: Vec<usize> = p.expr.expect_err("bad").iter().map(|e| e.offset).collect();
        assert_eq!(offsets, vec![16, 21, 26]);
    }

    proptest::proptest! {
        /// No condition makes the parser panic, and every offset it reports is in the text.
        #[test]
        fn no_condition_panics(text in "[ -~éü\u{1F600}{}]{0,40}") {
            let p = parse(&text, Scope::default());
            if let Err(errors) = &p.expr {
                for e in errors {
                    proptest::prop_assert!(text.is_char_boundary(e.offset), "{e:?}");
                }
            }
            for e in &p.template_errors {
                proptest::prop_assert!(text.is_char_boundary(e.offset), "{e:?}");
            }
        }
    }

    #[test]
    fn template_errors_after_a_syntax_error_are_found() {
        let p = parse("a b {{param.x}} > 1", Scope::default());
        assert!(p.expr.is_err());
        assert_eq!(p.template_errors.len(), 1);
        assert_eq!(p.template_errors[0].offset, 4);
    }
}
