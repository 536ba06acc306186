//! The message editor: a multi-line `TextArea` with the history of what
//! was sent (↑ on the first line, ↓ on the last). Enter sends, Alt+Enter,
//! Shift+Enter or Ctrl+J insert a newline; pasted text is inserted as is.

use ratatui::crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::style::{Modifier, Style};
use ratatui_textarea::TextArea;

/// What a key did to the editor.
#[derive(Debug, PartialEq, Eq)]
pub enum Edit {
    /// Enter: the text to send (the editor is cleared).
    Submit(String),
    /// The key changed the text or the cursor.
    Changed,
    /// Not an editing key.
    Ignored,
}

pub struct Editor {
    area: TextArea<'static>,
    history: Vec<String>,
    /// Position while browsing the history (None: the draft).
    browsing: Option<usize>,
    draft: String,
}

impl Default for Editor {
    fn default() -> Self {
        Self {
            area: fresh(),
            history: Vec::new(),
            browsing: None,
            draft: String::new(),
        }
    }
}

fn fresh() -> TextArea<'static> {
    let mut area = TextArea::default();
    area.set_cursor_line_style(Style::default());
    area.set_placeholder_text("Type a message, or / for commands");
    area.set_placeholder_style(Style::default().add_modifier(Modifier::DIM));
    area
}

impl Editor {
    pub fn text(&self) -> String {
        self.area.lines().join("\n")
    }

    pub fn set_text(&mut self, text: &str) {
        self.area = fresh();
        self.area.insert_str(text);
    }

    pub fn clear(&mut self) {
        self.area = fresh();
        self.browsing = None;
    }

    pub fn lines(&self) -> usize {
        self.area.lines().len()
    }

    pub fn widget(&self) -> &TextArea<'static> {
        &self.area
    }

    pub fn paste(&mut self, text: &str) {
        self.area
            .insert_str(text.replace("\r\n", "\n").replace('\r', "\n"));
    }

    pub fn key(&mut self, key: KeyEvent) -> Edit {
        let alt_or_shift = key
            .modifiers
            .intersects(KeyModifiers::ALT | KeyModifiers::SHIFT);
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        match key.code {
            KeyCode::Enter if alt_or_shift => {
                self.area.insert_newline();
                Edit::Changed
            }
            KeyCode::Char('j') if ctrl => {
                self.area.insert_newline();
                Edit::Changed
            }
            KeyCode::Enter => {
                let text = self.text();
                if text.trim().is_empty() {
                    return Edit::Ignored;
                }
                if self.history.last() != Some(&text) {
                    self.history.push(text.clone());
                }
                self.clear();
                Edit::Submit(text)
            }
            KeyCode::Up if self.area.cursor().0 == 0 => self.older(),
            KeyCode::Down if self.area.cursor().0 + 1 >= self.lines() => self.newer(),
            KeyCode::Esc | KeyCode::PageUp | KeyCode::PageDown | KeyCode::Tab => Edit::Ignored,
            _ => {
                if self.area.input(key) {
                    Edit::Changed
                } else {
                    Edit::Ignored
                }
            }
        }
    }

    fn older(&mut self) -> Edit {
        if self.history.is_empty() {
            return Edit::Ignored;
        }
        let next = match self.browsing {
            None => {
                self.draft = self.text();
                self.history.len() - 1
            }
            Some(0) => return Edit::Ignored,
            Some(i) => i - 1,
        };
        self.browsing = Some(next);
        let text = self.history[next].clone();
        self.set_text(&text);
        Edit::Changed
    }

    fn newer(&mut self) -> Edit {
        let Some(i) = self.browsing else {
            return Edit::Ignored;
        };
        if i + 1 < self.history.len() {
            self.browsing = Some(i + 1);
            let text = self.history[i + 1].clone();
            self.set_text(&text);
        } else {
            self.browsing = None;
            let draft = std::mem::take(&mut self.draft);
            self.set_text(&draft);
        }
        Edit::Changed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(code: KeyCode, modifiers: KeyModifiers) -> KeyEvent {
        KeyEvent::new(code, modifiers)
    }

    fn typed(e: &mut Editor, s: &str) {
        for c in s.chars() {
            e.key(key(KeyCode::Char(c), KeyModifiers::NONE));
        }
    }

    #[test]
    fn enter_sends_and_alt_enter_breaks_the_line() {
        let mut e = Editor::default();
        typed(&mut e, "ab");
        assert_eq!(e.key(key(KeyCode::Enter, KeyModifiers::ALT)), Edit::Changed);
        typed(&mut e, "c");
        assert_eq!(
            e.key(key(KeyCode::Enter, KeyModifiers::NONE)),
            Edit::Submit("ab\nc".into())
        );
        assert_eq!(e.text(), "");
        assert_eq!(
            e.key(key(KeyCode::Enter, KeyModifiers::NONE)),
            Edit::Ignored
        );
    }

    #[test]
    fn up_and_down_walk_the_history_and_keep_the_draft() {
        let mut e = Editor::default();
        for m in ["one", "two"] {
            typed(&mut e, m);
            e.key(key(KeyCode::Enter, KeyModifiers::NONE));
        }
        typed(&mut e, "dra");
        e.key(key(KeyCode::Up, KeyModifiers::NONE));
        assert_eq!(e.text(), "two");
        e.key(key(KeyCode::Up, KeyModifiers::NONE));
        assert_eq!(e.text(), "one");
        e.key(key(KeyCode::Down, KeyModifiers::NONE));
        e.key(key(KeyCode::Down, KeyModifiers::NONE));
        assert_eq!(e.text(), "dra");
    }

    #[test]
    fn a_paste_keeps_its_lines() {
        let mut e = Editor::default();
        e.paste("a\r\nb");
        assert_eq!(e.text(), "a\nb");
        assert_eq!(e.lines(), 2);
    }
}
