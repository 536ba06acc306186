//! PNG copies of the report's SVG charts (for a mail, a chat message, a
//! viewer without SVG), drawn by `resvg` with the system's fonts found
//! through a font database — Chinese, Japanese and Korean labels need a
//! CJK font such as Debian's `fonts-noto-cjk`. A bundled DejaVu Sans is
//! always there as the sans-serif font, so Latin labels are drawn on a
//! machine with no font at all; when a label needs glyphs no font has, the
//! report says so (the SVG and the Markdown tables keep them as text).

use std::sync::{Arc, OnceLock};

use resvg::{tiny_skia, usvg};

/// DejaVu Sans (Bitstream Vera licence: `assets/DejaVuSans.LICENSE`).
const BUNDLED: &[u8] = include_bytes!("../../assets/DejaVuSans.ttf");
const BUNDLED_FAMILY: &str = "DejaVu Sans";
/// Pixels per SVG unit: a 640-wide chart is a 1280-pixel PNG.
pub const SCALE: f32 = 2.0;

/// What the report says when a PNG could not draw some labels.
pub const FALLBACK_NOTE: &str = "\n> The PNG charts draw labels in Chinese, Japanese or Korean only \
with a CJK font, and this machine has none (on Debian: `apt install fonts-noto-cjk`); they were \
drawn with the bundled DejaVu Sans, which lacks those glyphs. The SVG charts and the tables \
above have every label as text.\n";

pub struct Fonts {
    db: Arc<usvg::fontdb::Database>,
    /// A face of a CJK family is among them.
    cjk: bool,
}

impl Fonts {
    /// The bundled font, and the system's when `system`.
    pub fn new(system: bool) -> Self {
        let mut db = usvg::fontdb::Database::new();
        if system {
            db.load_system_fonts();
        }
        db.load_font_data(BUNDLED.to_vec());
        db.set_sans_serif_family(BUNDLED_FAMILY);
        let cjk = db
            .faces()
            .any(|f| f.families.iter().any(|(name, _)| is_cjk_family(name)));
        Self {
            db: Arc::new(db),
            cjk,
        }
    }

    /// The system's fonts, loaded once per process.
    pub fn system() -> &'static Self {
        static FONTS: OnceLock<Fonts> = OnceLock::new();
        FONTS.get_or_init(|| Self::new(true))
    }

    #[cfg(test)]
    fn has_cjk(&self) -> bool {
        self.cjk
    }

    /// `text` needs glyphs none of these fonts has.
    pub fn lacks(&self, text: &str) -> bool {
        !self.cjk && text.chars().any(is_cjk_char)
    }
}

fn is_cjk_family(name: &str) -> bool {
    [
        "CJK",
        "Source Han",
        "WenQuanYi",
        "Droid Sans Fallback",
        "AR PL",
    ]
    .iter()
    .any(|f| name.contains(f))
}

fn is_cjk_char(c: char) -> bool {
    matches!(
        c as u32,
        0x2E80..=0x9FFF | 0xAC00..=0xD7AF | 0xF900..=0xFAFF | 0xFF00..=0xFFEF | 0x2_0000..=0x2_FA1F
    )
}

/// The chart `svg` as a PNG of [`SCALE`] pixels per unit.
pub fn png(svg: &str, fonts: &Fonts) -> Result<Vec<u8>, String> {
    let options = usvg::Options {
        fontdb: Arc::clone(&fonts.db),
        font_family: BUNDLED_FAMILY.into(),
        ..Default::default()
    };
    let tree = usvg::Tree::from_str(svg, &options).map_err(|e| format!("its SVG: {e}"))?;
    let size = tree.size();
    let (w, h) = (
        (size.width() * SCALE).ceil() as u32,
        (size.height() * SCALE).ceil() as u32,
    );
    let mut pixmap =
        tiny_skia::Pixmap::new(w, h).ok_or_else(|| format!("a {w}×{h} picture is not possible"))?;
    resvg::render(
        &tree,
        tiny_skia::Transform::from_scale(SCALE, SCALE),
        &mut pixmap.as_mut(),
    );
    pixmap.encode_png().map_err(|e| format!("encoding: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Dark pixels of `png` in the box `x0..x1` × `y0..y1` (SVG units).
    fn ink(png: &[u8], (x0, y0, x1, y1): (f32, f32, f32, f32)) -> usize {
        let p = tiny_skia::Pixmap::decode_png(png).unwrap();
        let mut n = 0;
        for y in (y0 * SCALE) as u32..(y1 * SCALE) as u32 {
            for x in (x0 * SCALE) as u32..(x1 * SCALE) as u32 {
                let c = p.pixel(x, y).unwrap();
                if c.alpha() > 128 && u32::from(c.red()) + u32::from(c.green()) < 200 {
                    n += 1;
                }
            }
        }
        n
    }

    fn label(text: &str) -> String {
        format!(
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="200" height="40" viewBox="0 0 200 40" font-family="Noto Sans CJK SC, Noto Sans, sans-serif" font-size="16"><rect width="100%" height="100%" fill="white"/><text x="10" y="28">{text}</text></svg>"#
        )
    }

    #[test]
    fn the_png_decodes_at_twice_the_svg_size_with_its_latin_labels_drawn() {
        // The bundled font alone: what a machine with no font gets.
        let fonts = Fonts::new(false);
        assert!(!fonts.has_cjk());
        let png = png(&label("billing"), &fonts).unwrap();
        let decoded = tiny_skia::Pixmap::decode_png(&png).unwrap();
        assert_eq!((decoded.width(), decoded.height()), (400, 80));
        assert!(
            ink(&png, (10.0, 10.0, 80.0, 32.0)) > 50,
            "the label is drawn"
        );
        assert_eq!(ink(&png, (120.0, 0.0, 200.0, 40.0)), 0, "nothing past it");
        assert!(fonts.lacks("退款") && !fonts.lacks("billing"));
    }

    #[test]
    fn chinese_labels_are_drawn_with_the_systems_cjk_font() {
        let fonts = Fonts::system();
        if !fonts.has_cjk() {
            assert!(
                std::env::var_os("CI").is_none(),
                "no CJK font on this machine: apt install fonts-noto-cjk"
            );
            return;
        }
        assert!(!fonts.lacks("退款"));
        let png = png(&label("退款 物流"), fonts).unwrap();
        assert!(
            ink(&png, (10.0, 8.0, 90.0, 34.0)) > 100,
            "the label is drawn"
        );
    }

    #[test]
    fn a_broken_svg_is_an_error_not_a_picture() {
        assert!(png("<svg", &Fonts::new(false)).is_err());
    }
}
