//! Aligned columns and short ages, as kubectl prints them. Pure.

use k8s_openapi::jiff::Timestamp;

/// Rows of cells printed with every column but the last padded to its
/// widest cell plus two spaces, each line indented by `indent`.
pub(crate) fn render(indent: &str, header: &[&str], rows: &[Vec<String>]) -> String {
    let columns = header.len();
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let header: Vec<String> = header.iter().map(|h| (*h).to_owned()).collect();
    for row in std::iter::once(&header).chain(rows) {
        let mut line = String::from(indent);
        for (i, cell) in row.iter().enumerate().take(columns) {
            line.push_str(cell);
            if i + 1 < columns {
                let pad = widths[i] - cell.chars().count() + 2;
                line.extend(std::iter::repeat_n(' ', pad));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// A cell's text on one line: line breaks and other control characters
/// become spaces.
pub(crate) fn cell(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect::<String>()
        .trim()
        .to_owned()
}

/// How long ago `then` was: `45s`, `12m`, `3h`, `5d` (the unit switches at
/// twice its size: `90s`, `100m`, `30h`).
pub(crate) fn age(then: Timestamp, now: Timestamp) -> String {
    let secs = now.as_second().saturating_sub(then.as_second()).max(0);
    match secs {
        s if s < 120 => format!("{s}s"),
        s if s < 120 * 60 => format!("{}m", s / 60),
        s if s < 48 * 3600 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86_400),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_pad_to_the_widest_cell_and_the_last_is_not_padded() {
        let rows = vec![
            vec!["chief".to_owned(), "0".to_owned(), "ok".to_owned()],
            vec!["worker".to_owned(), "12".to_owned(), String::new()],
        ];
        assert_eq!(
            render("  ", &["ROLE", "INDEX", "NOTE"], &rows),
            "  ROLE    INDEX  NOTE\n  chief   0      ok\n  worker  12\n"
        );
    }

    #[test]
    fn cells_are_one_line() {
        assert_eq!(cell(" a\nb\tc\r\n"), "a b c");
    }

    #[test]
    fn ages_switch_unit_at_twice_its_size() {
        let now = Timestamp::from_second(1_000_000).unwrap();
        let ago = |s: i64| age(Timestamp::from_second(1_000_000 - s).unwrap(), now);
        assert_eq!(
            [
                ago(0),
                ago(119),
                ago(120),
                ago(7199),
                ago(7200),
                ago(172_799),
                ago(172_800)
            ],
            ["0s", "119s", "2m", "119m", "2h", "47h", "2d"]
        );
        // A clock behind the server's: never a negative age.
        assert_eq!(ago(-5), "0s");
    }
}
