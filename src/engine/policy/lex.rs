//! Tokens of the rule language. Pure and total: any input yields tokens or a positioned
//! error, never a panic. Columns are 1-based and count characters, not bytes.

use super::error::RuleErrorKind;

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Tok<'a> {
    /// Keyword, variable, health constant or unquoted window name:
    /// `[A-Za-z_][A-Za-z0-9_.-]*`.
    Word(&'a str),
    /// `digits ['.' digits]`.
    Number {
        whole: &'a str,
        frac: &'a str,
    },
    /// `"…"` or `'…'`, with `\` escaping the next character.
    Quoted(String),
    Lt,
    Le,
    Gt,
    Ge,
    Eq,
    Ne,
    LParen,
    RParen,
    DotDot,
    Percent,
    End,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Token<'a> {
    pub tok: Tok<'a>,
    pub column: u32,
}

impl Tok<'_> {
    /// How an error message names this token.
    pub fn describe(&self, end: &'static str) -> String {
        match self {
            Tok::Word(w) => format!("'{w}'"),
            Tok::Number { whole, frac: "" } => format!("'{whole}'"),
            Tok::Number { whole, frac } => format!("'{whole}.{frac}'"),
            Tok::Quoted(s) => format!("\"{s}\""),
            Tok::Lt => "'<'".into(),
            Tok::Le => "'<='".into(),
            Tok::Gt => "'>'".into(),
            Tok::Ge => "'>='".into(),
            Tok::Eq => "'='".into(),
            Tok::Ne => "'!='".into(),
            Tok::LParen => "'('".into(),
            Tok::RParen => "')'".into(),
            Tok::DotDot => "'..'".into(),
            Tok::Percent => "'%'".into(),
            Tok::End => end.into(),
        }
    }
}

/// Splits `src` into tokens, ending with `Tok::End`.
pub(crate) fn lex(src: &str) -> Result<Vec<Token<'_>>, (u32, RuleErrorKind)> {
    let mut out = Vec::new();
    // (byte offset, char) pairs with a column counter alongside.
    let chars: Vec<(usize, char)> = src.char_indices().collect();
    let byte_at = |i: usize| chars.get(i).map_or(src.len(), |&(b, _)| b);
    let char_at = |i: usize| chars.get(i).map(|&(_, c)| c);
    let mut i = 0;
    while let Some(c) = char_at(i) {
        let column = u32::try_from(i + 1).unwrap_or(u32::MAX);
        let next = char_at(i + 1);
        match c {
            c if c.is_whitespace() => i += 1,
            c if c.is_ascii_alphabetic() || c == '_' => {
                let start = i;
                i += 1;
                while char_at(i).is_some_and(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.')) {
                    i += 1;
                }
                out.push(Token { tok: Tok::Word(&src[byte_at(start)..byte_at(i)]), column });
            }
            c if c.is_ascii_digit() => {
                let start = i;
                while char_at(i).is_some_and(|c| c.is_ascii_digit()) {
                    i += 1;
                }
                let whole = &src[byte_at(start)..byte_at(i)];
                let mut frac = "";
                if char_at(i) == Some('.') && char_at(i + 1).is_some_and(|c| c.is_ascii_digit()) {
                    let fstart = i + 1;
                    i += 1;
                    while char_at(i).is_some_and(|c| c.is_ascii_digit()) {
                        i += 1;
                    }
                    frac = &src[byte_at(fstart)..byte_at(i)];
                }
                out.push(Token { tok: Tok::Number { whole, frac }, column });
            }
            '"' | '\'' => {
                let quote = c;
                let mut text = String::new();
                i += 1;
                loop {
                    match char_at(i) {
                        None => return Err((column, RuleErrorKind::UnterminatedQuote)),
                        Some(q) if q == quote => break,
                        Some('\\') => {
                            let Some(escaped) = char_at(i + 1) else {
                                return Err((column, RuleErrorKind::UnterminatedQuote));
                            };
                            text.push(escaped);
                            i += 2;
                        }
                        Some(other) => {
                            text.push(other);
                            i += 1;
                        }
                    }
                }
                i += 1;
                out.push(Token { tok: Tok::Quoted(text), column });
            }
            '<' if next == Some('=') => {
                out.push(Token { tok: Tok::Le, column });
                i += 2;
            }
            '<' if next == Some('>') => {
                return Err((column, RuleErrorKind::ForeignOperator { found: "<>", instead: "'!='" }));
            }
            '<' => {
                out.push(Token { tok: Tok::Lt, column });
                i += 1;
            }
            '>' if next == Some('=') => {
                out.push(Token { tok: Tok::Ge, column });
                i += 2;
            }
            '>' => {
                out.push(Token { tok: Tok::Gt, column });
                i += 1;
            }
            '=' if next == Some('=') => {
                return Err((column, RuleErrorKind::ForeignOperator { found: "==", instead: "'='" }));
            }
            '=' => {
                out.push(Token { tok: Tok::Eq, column });
                i += 1;
            }
            '!' if next == Some('=') => {
                out.push(Token { tok: Tok::Ne, column });
                i += 2;
            }
            '!' => return Err((column, RuleErrorKind::ForeignOperator { found: "!", instead: "NOT" })),
            '&' if next == Some('&') => {
                return Err((column, RuleErrorKind::ForeignOperator { found: "&&", instead: "AND" }));
            }
            '|' if next == Some('|') => {
                return Err((column, RuleErrorKind::ForeignOperator { found: "||", instead: "OR" }));
            }
            '(' => {
                out.push(Token { tok: Tok::LParen, column });
                i += 1;
            }
            ')' => {
                out.push(Token { tok: Tok::RParen, column });
                i += 1;
            }
            '.' if next == Some('.') => {
                out.push(Token { tok: Tok::DotDot, column });
                i += 2;
            }
            '%' => {
                out.push(Token { tok: Tok::Percent, column });
                i += 1;
            }
            other => return Err((column, RuleErrorKind::UnexpectedChar(other))),
        }
    }
    let column = u32::try_from(chars.len() + 1).unwrap_or(u32::MAX);
    out.push(Token { tok: Tok::End, column });
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(src: &str) -> Vec<Tok<'_>> {
        lex(src).unwrap().into_iter().map(|t| t.tok).collect()
    }

    #[test]
    fn clamp_range_is_two_numbers_and_a_dot_dot() {
        assert_eq!(
            toks("1..10 2.5..3"),
            vec![
                Tok::Number { whole: "1", frac: "" },
                Tok::DotDot,
                Tok::Number { whole: "10", frac: "" },
                Tok::Number { whole: "2", frac: "5" },
                Tok::DotDot,
                Tok::Number { whole: "3", frac: "" },
                Tok::End
            ]
        );
    }

    #[test]
    fn columns_count_characters_not_bytes() {
        let t = lex("\"é\" <= 5").unwrap();
        assert_eq!(t[1].column, 5);
        assert_eq!(t[2].column, 8);
        assert_eq!(t[3].column, 9);
    }

    #[test]
    fn quoted_names_unescape() {
        assert_eq!(toks(r#"'a b' "x\"y""#), vec![Tok::Quoted("a b".into()), Tok::Quoted("x\"y".into()), Tok::End]);
    }

    #[test]
    fn foreign_operators_get_a_hint() {
        assert_eq!(lex("a == 1").unwrap_err(), (3, RuleErrorKind::ForeignOperator { found: "==", instead: "'='" }));
        assert_eq!(lex("a && b").unwrap_err().0, 3);
        assert_eq!(lex("!a").unwrap_err().0, 1);
        assert_eq!(lex("'abc").unwrap_err(), (1, RuleErrorKind::UnterminatedQuote));
        assert_eq!(lex("a # b").unwrap_err(), (3, RuleErrorKind::UnexpectedChar('#')));
    }
}
