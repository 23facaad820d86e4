//! Chat templates: the model's Jinja `chat_template`, rendered as transformers'
//! `apply_chat_template` renders it (trim_blocks, lstrip_blocks, `raise_exception`, Python-style
//! `tojson` and string methods). Invariant: same template + messages → the same string as transformers.

use crate::TokenizerError;
use minijinja::{Environment, Error, ErrorKind, Value, context};
use serde::Serialize;

/// One turn of a conversation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct ChatMessage {
    pub role: String,
    pub content: String,
}

impl ChatMessage {
    pub fn new(role: &str, content: &str) -> Self {
        ChatMessage { role: role.into(), content: content.into() }
    }
}

/// A compiled chat template with the special-token strings it may refer to.
#[derive(Debug)]
pub struct ChatTemplate {
    env: Environment<'static>,
    bos_token: String,
    eos_token: String,
}

/// JSON as Python's `json.dumps` writes it (`", "` and `": "` separators, no ASCII escaping),
/// which transformers' `tojson` filter uses.
fn py_json(v: &serde_json::Value, indent: Option<usize>, depth: usize, out: &mut String) {
    let (sep, pad, pad_end) = match indent {
        Some(n) => {
            (",".to_string(), format!("\n{}", " ".repeat(n * (depth + 1))), format!("\n{}", " ".repeat(n * depth)))
        }
        None => (", ".to_string(), String::new(), String::new()),
    };
    match v {
        serde_json::Value::Array(items) if !items.is_empty() => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                out.push_str(if i > 0 { &sep } else { "" });
                out.push_str(&pad);
                py_json(item, indent, depth + 1, out);
            }
            out.push_str(&pad_end);
            out.push(']');
        }
        serde_json::Value::Object(map) if !map.is_empty() => {
            out.push('{');
            for (i, (k, item)) in map.iter().enumerate() {
                out.push_str(if i > 0 { &sep } else { "" });
                out.push_str(&pad);
                out.push_str(&serde_json::Value::String(k.clone()).to_string());
                out.push_str(": ");
                py_json(item, indent, depth + 1, out);
            }
            out.push_str(&pad_end);
            out.push('}');
        }
        other => out.push_str(&other.to_string()),
    }
}

fn tojson(value: Value, kwargs: minijinja::value::Kwargs) -> Result<Value, Error> {
    let indent: Option<usize> = kwargs.get("indent")?;
    let json = serde_json::to_value(&value).map_err(|e| Error::new(ErrorKind::InvalidOperation, e.to_string()))?;
    let mut out = String::new();
    py_json(&json, indent, 0, &mut out);
    Ok(Value::from_safe_string(out))
}

impl ChatTemplate {
    /// Compiles `source`; `bos_token`/`eos_token` are the texts templates see under those names.
    pub fn new(source: &str, bos_token: &str, eos_token: &str) -> Result<Self, TokenizerError> {
        let mut env = Environment::new();
        env.set_trim_blocks(true);
        env.set_lstrip_blocks(true);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", |msg: String| -> Result<Value, Error> {
            Err(Error::new(ErrorKind::InvalidOperation, msg))
        });
        env.add_function("strftime_now", |_fmt: String| -> Result<Value, Error> {
            Err(Error::new(ErrorKind::InvalidOperation, "strftime_now is not available: renders must be reproducible"))
        });
        env.add_filter("tojson", tojson);
        env.add_template_owned("chat", source.to_string()).map_err(|e| TokenizerError::Template(e.to_string()))?;
        Ok(ChatTemplate { env, bos_token: bos_token.into(), eos_token: eos_token.into() })
    }

    /// Renders a conversation; `add_generation_prompt` opens the assistant's turn.
    pub fn render(&self, messages: &[ChatMessage], add_generation_prompt: bool) -> Result<String, TokenizerError> {
        let tmpl = self.env.get_template("chat").map_err(|e| TokenizerError::Template(e.to_string()))?;
        tmpl.render(context! {
            messages => messages,
            add_generation_prompt => add_generation_prompt,
            bos_token => self.bos_token,
            eos_token => self.eos_token,
        })
        .map_err(|e| {
            let mut msg = e.to_string();
            let mut src = std::error::Error::source(&e);
            while let Some(s) = src {
                msg.push_str(&format!(": {s}"));
                src = s.source();
            }
            TokenizerError::Template(msg)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_style_json() {
        let t = ChatTemplate::new("{{ x | tojson }}|{{ x | tojson(indent=2) }}", "", "").unwrap();
        let env = &t.env;
        let out = env
            .get_template("chat")
            .unwrap()
            .render(context! { x => serde_json::json!({"a": [1, "é"], "b": {}}) })
            .unwrap();
        assert_eq!(out, "{\"a\": [1, \"é\"], \"b\": {}}|{\n  \"a\": [\n    1,\n    \"é\"\n  ],\n  \"b\": {}\n}");
    }

    #[test]
    fn raise_exception_is_an_error() {
        let t = ChatTemplate::new("{{ raise_exception('roles must alternate') }}", "", "").unwrap();
        let err = t.render(&[], false).unwrap_err().to_string();
        assert!(err.contains("roles must alternate"), "{err}");
    }
}
