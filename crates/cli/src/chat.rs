//! `plumb chat`: an interactive conversation. On a terminal, lines are edited and recalled with
//! rustyline (history in `$PLUMB_HOME/chat_history`); from a pipe, each line is one turn.
//! Ctrl-C during a reply stops it (the partial reply stays in the conversation, as shown);
//! Ctrl-C at the prompt drops the line, and a second one in a row, Ctrl-D or `/bye` leaves.

use crate::counts::plural;
use crate::run::{Finish, NoRoom, SampleArgs, generate};
use crate::session::{ModelArgs, Session};
use crate::signals::CatchInterrupt;
use anyhow::{Context, Result, bail};
use plumb_tokenizer::ChatMessage;
use rustyline::DefaultEditor;
use rustyline::error::ReadlineError;
use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;

const HELP: &str = "\
/clear        forget the conversation (keeps the system message)
/system TEXT  set the system message (/system alone removes it)
/bye          leave (so do Ctrl-D and Ctrl-C twice)
/help         this list
Start a message with // to send a leading /. Ctrl-C stops a reply.";

/// One line of input, or why there is none.
enum Input {
    Line(String),
    Interrupted,
    End,
}

/// Where lines come from: an editor on a terminal, plain lines otherwise.
enum Lines {
    Editor { editor: Box<DefaultEditor>, history: Option<PathBuf> },
    Plain(std::io::StdinLock<'static>),
}

impl Lines {
    fn open() -> Result<Lines> {
        if !std::io::stdin().is_terminal() {
            return Ok(Lines::Plain(std::io::stdin().lock()));
        }
        let config = rustyline::Config::builder()
            .auto_add_history(true)
            .history_ignore_dups(true)?
            .behavior(rustyline::Behavior::PreferTerm)
            .build();
        let mut editor = DefaultEditor::with_config(config).context("starting the line editor")?;
        let history = plumb_checkpoint::source::plumb_home().ok().map(|h| h.join("chat_history"));
        if let Some(h) = &history {
            // A missing or unreadable history only means starting without one.
            let _ = editor.load_history(h);
        }
        Ok(Lines::Editor { editor: Box::new(editor), history })
    }

    fn read(&mut self) -> Result<Input> {
        match self {
            Lines::Editor { editor, .. } => match editor.readline("> ") {
                Ok(line) => Ok(Input::Line(line)),
                Err(ReadlineError::Interrupted) => Ok(Input::Interrupted),
                Err(ReadlineError::Eof) => Ok(Input::End),
                Err(e) => Err(e).context("reading a line"),
            },
            Lines::Plain(stdin) => {
                eprint!("> ");
                std::io::stderr().flush()?;
                let mut line = String::new();
                if stdin.read_line(&mut line).context("reading standard input")? == 0 {
                    eprintln!();
                    return Ok(Input::End);
                }
                Ok(Input::Line(line.trim_end_matches(['\n', '\r']).to_string()))
            }
        }
    }

    fn save(&mut self) {
        if let Lines::Editor { editor, history: Some(h) } = self {
            if let Some(dir) = h.parent() {
                let _ = std::fs::create_dir_all(dir);
            }
            // History is a convenience; failing to save it must not fail the chat.
            let _ = editor.save_history(h);
        }
    }
}

/// The conversation: an optional system message, then user and assistant turns.
#[derive(Default)]
struct Conversation {
    system: Option<String>,
    turns: Vec<ChatMessage>,
}

impl Conversation {
    fn messages(&self) -> Vec<ChatMessage> {
        let system = self.system.iter().map(|s| ChatMessage::new("system", s));
        system.chain(self.turns.iter().cloned()).collect()
    }
}

pub fn chat(model: &ModelArgs, sample: &SampleArgs, system: Option<&str>) -> Result<()> {
    let mut s = Session::open(model, 512)?;
    if s.template.is_none() {
        bail!("this model has no chat template, so `plumb chat` cannot format turns; try `plumb run --raw`");
    }
    let mut conv = Conversation { system: system.map(String::from), turns: Vec::new() };
    let mut lines = Lines::open()?;
    eprintln!("plumb chat — {} — /help for commands, Ctrl-D or /bye to leave", s.path.display());
    let mut interrupted_at_prompt = false;
    loop {
        let line = match lines.read()? {
            Input::End => break,
            Input::Interrupted if interrupted_at_prompt => break,
            Input::Interrupted => {
                eprintln!("(Ctrl-C again, Ctrl-D or /bye to leave)");
                interrupted_at_prompt = true;
                continue;
            }
            Input::Line(line) => line,
        };
        interrupted_at_prompt = false;
        let message = match line.strip_prefix('/') {
            Some(escaped) if escaped.starts_with('/') => escaped.to_string(),
            Some(command) => {
                let (name, arg) = command.split_once(char::is_whitespace).unwrap_or((command, ""));
                match name {
                    "bye" | "exit" | "quit" => break,
                    "help" | "?" => eprintln!("{HELP}"),
                    "clear" => {
                        conv.turns.clear();
                        eprintln!("(conversation cleared)");
                    }
                    "system" if arg.trim().is_empty() => {
                        conv.system = None;
                        eprintln!("(system message removed)");
                    }
                    "system" => {
                        conv.system = Some(arg.trim().to_string());
                        eprintln!("(system message set)");
                    }
                    _ => eprintln!("unknown command /{name}; /help lists the commands"),
                }
                continue;
            }
            None if line.trim().is_empty() => continue,
            None => line,
        };
        conv.turns.push(ChatMessage::new("user", &message));
        match reply(&mut s, &conv, sample) {
            Ok(text) => conv.turns.push(ChatMessage::new("assistant", &text)),
            Err(e) => {
                // A turn that cannot be answered is dropped; the conversation goes on.
                conv.turns.pop();
                let hint = if e.is::<NoRoom>() { " (/clear starts a new conversation)" } else { "" };
                eprintln!("error: {e}{hint}");
            }
        }
    }
    lines.save();
    Ok(())
}

/// Streams the assistant's reply to the conversation and returns its text; notes on stderr say
/// when it was cut short.
fn reply(s: &mut Session, conv: &Conversation, sample: &SampleArgs) -> Result<String> {
    let text = s.template.as_ref().expect("checked at start").render(&conv.messages(), true)?;
    let ids = s.tokenizer.encode(&text, true, true);
    let mut stdout = std::io::stdout().lock();
    let stats = {
        let interrupt = CatchInterrupt::new();
        generate(s, ids, sample, Some(&interrupt), &mut stdout)?
    };
    writeln!(stdout)?;
    stdout.flush()?;
    match stats.finish {
        Finish::EndOfTurn | Finish::StopText => {}
        Finish::MaxTokens(n) => eprintln!("[reply cut at the -n limit of {}]", plural(n, "token", "tokens")),
        Finish::ContextFull(n) => eprintln!("[reply cut: context full ({n} tokens); /clear starts over]"),
        Finish::Interrupted => eprintln!("[stopped by Ctrl-C]"),
    }
    Ok(stats.text)
}
