//! The rule language: a condition over one key's (or window's) aggregates, parsed at
//! load with `winnow` and evaluated after each line without allocating.
//!
//! ```text
//! condition  = or
//! or         = and ("or" and)*
//! and        = not ("and" not)*
//! not        = "not" not | comparison
//! comparison = operand ("<" | "<=" | ">" | ">=" | "==" | "!=") operand | "(" condition ")"
//! operand    = number | "string" | name | name "(" field ")"
//! ```
//!
//! A name is an aggregate of the settings, `count`, or a `group_by` field; a call
//! (`sum(amount)`) is the aggregate of that field, declared or not.

use std::ops::Range;

use winnow::ascii::{digit0, digit1, multispace0};
use winnow::combinator::{alt, cut_err, delimited, not, opt, preceded, repeat, terminated};
use winnow::error::{ContextError, StrContext, StrContextValue};
use winnow::prelude::*;
use winnow::stream::LocatingSlice;
use winnow::token::{one_of, take_till, take_while};

use crate::decimal::Decimal;

type Input<'a> = LocatingSlice<&'a str>;

/// A comparison operator.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CompareOp {
    Less,
    LessOrEqual,
    Greater,
    GreaterOrEqual,
    Equal,
    NotEqual,
}

/// A condition as parsed, names not yet resolved.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Ast {
    Or(Box<Ast>, Box<Ast>),
    And(Box<Ast>, Box<Ast>),
    Not(Box<Ast>),
    Compare(Box<AstOperand>, CompareOp, Box<AstOperand>),
    /// An operand where a condition is needed (`count` alone): refused at resolution.
    Bare(Box<AstOperand>),
}

/// An operand as parsed, with its span in the text.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum AstOperand {
    Number(Decimal),
    Text(String),
    Name(String, Range<usize>),
    Call(String, String, Range<usize>),
}

/// A parse error: the byte offset and what was expected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SyntaxError {
    pub(crate) offset: usize,
    pub(crate) message: String,
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

fn name<'a>(input: &mut Input<'a>) -> ModalResult<&'a str> {
    (
        one_of(|c: char| c.is_ascii_alphabetic() || c == '_'),
        take_while(0.., is_name_char),
    )
        .take()
        .parse_next(input)
}

fn keyword<'a>(
    word: &'static str,
) -> impl Parser<Input<'a>, &'a str, winnow::error::ErrMode<ContextError>> {
    delimited(
        multispace0,
        terminated(word, not(one_of(is_name_char))),
        multispace0,
    )
}

fn expected(what: &'static str) -> StrContext {
    StrContext::Expected(StrContextValue::Description(what))
}

fn number(input: &mut Input<'_>) -> ModalResult<AstOperand> {
    let text = (
        opt(one_of(['-', '+'])),
        alt(((digit1, opt(('.', digit0))).void(), ('.', digit1).void())),
    )
        .take()
        .parse_next(input)?;
    match Decimal::parse(text) {
        Some(value) => Ok(AstOperand::Number(value)),
        None => Err(winnow::error::ErrMode::Cut(ContextError::new())),
    }
}

fn text(input: &mut Input<'_>) -> ModalResult<AstOperand> {
    preceded(
        '"',
        cut_err(terminated(take_till(0.., '"'), '"')).context(expected("a closing \"")),
    )
    .map(|text: &str| AstOperand::Text(text.to_owned()))
    .parse_next(input)
}

fn name_or_call(input: &mut Input<'_>) -> ModalResult<AstOperand> {
    let ((function, argument), span) = (
        name,
        opt(preceded(
            (multispace0, '('),
            cut_err(delimited(multispace0, name, (multispace0, ')')))
                .context(expected("a field name and `)`")),
        )),
    )
        .with_span()
        .parse_next(input)?;
    if matches!(function, "and" | "or" | "not") {
        return Err(winnow::error::ErrMode::Backtrack(ContextError::new()));
    }
    Ok(match argument {
        Some(argument) => AstOperand::Call(function.to_owned(), argument.to_owned(), span),
        None => AstOperand::Name(function.to_owned(), span),
    })
}

fn operand(input: &mut Input<'_>) -> ModalResult<AstOperand> {
    delimited(multispace0, alt((number, text, name_or_call)), multispace0)
        .context(expected(
            "a number, a \"string\", an aggregate or a call such as sum(amount)",
        ))
        .parse_next(input)
}

fn compare_op(input: &mut Input<'_>) -> ModalResult<CompareOp> {
    alt((
        "<=".value(CompareOp::LessOrEqual),
        ">=".value(CompareOp::GreaterOrEqual),
        "==".value(CompareOp::Equal),
        "!=".value(CompareOp::NotEqual),
        "<".value(CompareOp::Less),
        ">".value(CompareOp::Greater),
        "=".value(CompareOp::Equal),
    ))
    .parse_next(input)
}

fn comparison(input: &mut Input<'_>) -> ModalResult<Ast> {
    let parenthesised = delimited(
        (multispace0, '('),
        cut_err(condition),
        cut_err((multispace0, ')', multispace0)).context(expected("`)`")),
    );
    alt((
        parenthesised,
        (operand, opt((compare_op, cut_err(operand)))).map(|(left, rest)| match rest {
            Some((op, right)) => Ast::Compare(Box::new(left), op, Box::new(right)),
            None => Ast::Bare(Box::new(left)),
        }),
    ))
    .parse_next(input)
}

fn negation(input: &mut Input<'_>) -> ModalResult<Ast> {
    alt((
        preceded(keyword("not"), cut_err(negation)).map(|inner| Ast::Not(Box::new(inner))),
        comparison,
    ))
    .parse_next(input)
}

fn conjunction(input: &mut Input<'_>) -> ModalResult<Ast> {
    let first = negation.parse_next(input)?;
    repeat(0.., preceded(keyword("and"), cut_err(negation)))
        .fold(
            move || first.clone(),
            |left, right| Ast::And(Box::new(left), Box::new(right)),
        )
        .parse_next(input)
}

fn condition(input: &mut Input<'_>) -> ModalResult<Ast> {
    let first = conjunction.parse_next(input)?;
    repeat(0.., preceded(keyword("or"), cut_err(conjunction)))
        .fold(
            move || first.clone(),
            |left, right| Ast::Or(Box::new(left), Box::new(right)),
        )
        .parse_next(input)
}

fn syntax_error(error: winnow::error::ParseError<Input<'_>, ContextError>) -> SyntaxError {
    let described = error.inner().to_string();
    SyntaxError {
        offset: error.offset(),
        message: if described.is_empty() {
            "unexpected text".to_owned()
        } else {
            described.replace('\n', "; ")
        },
    }
}

/// Parses a whole condition.
pub(crate) fn parse_condition(source: &str) -> Result<Ast, SyntaxError> {
    condition
        .parse(LocatingSlice::new(source))
        .map_err(syntax_error)
}

/// Parses an aggregate's spec: `count` or `sum(amount)`.
pub(crate) fn parse_aggregate(source: &str) -> Result<AstOperand, SyntaxError> {
    delimited(multispace0, name_or_call, multispace0)
        .parse(LocatingSlice::new(source))
        .map_err(syntax_error)
}

/// `message` at `offset` of `source`, with the column and a caret line.
pub(crate) fn with_caret(source: &str, offset: usize, message: &str) -> String {
    let offset = offset.min(source.len());
    let column = source[..offset].chars().count() + 1;
    format!(
        "{message} at column {column}\n  {source}\n  {caret:>column$}",
        caret = "^"
    )
}

/// What an operand reads when a condition is evaluated.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Operand {
    /// A constant number.
    Number(Decimal),
    /// A constant string.
    Text(String),
    /// The aggregate in this slot.
    Slot(usize),
    /// The key's value of this `group_by` field.
    KeyPart(usize),
}

/// A resolved condition.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Condition {
    Or(Box<Condition>, Box<Condition>),
    And(Box<Condition>, Box<Condition>),
    Not(Box<Condition>),
    Compare(Operand, CompareOp, Operand),
}

/// A value an operand reads, borrowed.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Scalar<'a> {
    Number(Decimal),
    Text(&'a str),
    Time(i64),
}

impl Condition {
    /// Resolves `ast`: `resolve` turns a name or a call into an operand, or says why
    /// not (the error is placed at the name's span).
    pub(crate) fn resolve(
        ast: &Ast,
        resolve: &mut dyn FnMut(&AstOperand) -> Result<Operand, String>,
    ) -> Result<Condition, SyntaxError> {
        let mut operand = |parsed: &AstOperand| -> Result<Operand, SyntaxError> {
            match parsed {
                AstOperand::Number(value) => Ok(Operand::Number(*value)),
                AstOperand::Text(text) => Ok(Operand::Text(text.clone())),
                AstOperand::Name(_, span) | AstOperand::Call(_, _, span) => resolve(parsed)
                    .map_err(|message| SyntaxError {
                        offset: span.start,
                        message,
                    }),
            }
        };
        Ok(match ast {
            Ast::Or(left, right) => Condition::Or(
                Box::new(Self::resolve(left, resolve)?),
                Box::new(Self::resolve(right, resolve)?),
            ),
            Ast::And(left, right) => Condition::And(
                Box::new(Self::resolve(left, resolve)?),
                Box::new(Self::resolve(right, resolve)?),
            ),
            Ast::Not(inner) => Condition::Not(Box::new(Self::resolve(inner, resolve)?)),
            Ast::Compare(left, op, right) => {
                Condition::Compare(operand(left)?, *op, operand(right)?)
            }
            Ast::Bare(alone) => {
                let offset = match &**alone {
                    AstOperand::Name(_, span) | AstOperand::Call(_, _, span) => span.start,
                    _ => 0,
                };
                return Err(SyntaxError {
                    offset,
                    message: "a condition needs a comparison (such as `count > 5`)".to_owned(),
                });
            }
        })
    }

    /// Evaluates the condition; `read` gives an operand's value (`None`: no value yet,
    /// such as the `min` of nothing). A comparison of a missing value, or of values of
    /// two kinds, is false.
    pub(crate) fn eval<'a>(&'a self, read: &dyn Fn(&'a Operand) -> Option<Scalar<'a>>) -> bool {
        match self {
            Condition::Or(left, right) => left.eval(read) || right.eval(read),
            Condition::And(left, right) => left.eval(read) && right.eval(read),
            Condition::Not(inner) => !inner.eval(read),
            Condition::Compare(left, op, right) => {
                let ordering = match (read(left), read(right)) {
                    (Some(Scalar::Number(a)), Some(Scalar::Number(b))) => a.cmp(&b),
                    (Some(Scalar::Text(a)), Some(Scalar::Text(b))) => a.cmp(b),
                    (Some(Scalar::Time(a)), Some(Scalar::Time(b))) => a.cmp(&b),
                    _ => return false,
                };
                match op {
                    CompareOp::Less => ordering.is_lt(),
                    CompareOp::LessOrEqual => ordering.is_le(),
                    CompareOp::Greater => ordering.is_gt(),
                    CompareOp::GreaterOrEqual => ordering.is_ge(),
                    CompareOp::Equal => ordering.is_eq(),
                    CompareOp::NotEqual => ordering.is_ne(),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conditions_parse_with_precedence_and_parentheses() {
        let ast = parse_condition("sum(amount) < 0 or count > 5 and not (n == \"x\")").unwrap();
        let Ast::Or(left, right) = ast else {
            panic!("or at the top: {ast:?}")
        };
        assert!(matches!(*left, Ast::Compare(_, CompareOp::Less, _)));
        assert!(matches!(*right, Ast::And(_, _)));
        assert!(parse_condition("count>=-1.5").is_ok());
        assert!(parse_condition("(count > 1)").is_ok());
        assert!(
            parse_condition("notice > 1").is_ok(),
            "a name that starts with a keyword"
        );
    }

    #[test]
    fn syntax_errors_have_their_offset() {
        for (source, offset) in [
            ("sum(amount) <", 13),
            ("count > 5 and", 13),
            ("sum(amount < 0", 11),
            ("count > 5 )", 10),
            ("(count > 5", 10),
        ] {
            let error = parse_condition(source).unwrap_err();
            assert_eq!(error.offset, offset, "{source}: {error:?}");
        }
    }
}
