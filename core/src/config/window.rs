//! Maintenance windows of the central role: times of the week in which re-layouts may
//! start (`"Mon-Fri 20:00-06:00"`, `"Sat,Sun 00:00-24:00"`, `"02:00-04:00"` every day).

use std::fmt;

const DAYS: [&str; 7] = ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"];

/// One window: the days it starts on and its start and end, in minutes of the day
/// (local time). An end before the start runs past midnight into the next day.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// Bit `d` set: the window starts on weekday `d` (0 = Monday).
    days: u8,
    start: u32,
    end: u32,
}

impl Window {
    /// Parses `"[DAYS ]HH:MM-HH:MM"`; DAYS is a comma list of days or day ranges.
    pub fn parse(text: &str) -> Result<Window, String> {
        let bad = |why: &str| format!("`{text}`: {why} (e.g. \"Mon-Fri 20:00-06:00\" or \"02:00-04:00\")");
        let (days, times) = match text.trim().rsplit_once(' ') {
            Some((d, t)) => (parse_days(d.trim()).map_err(|e| bad(&e))?, t),
            None => (0x7f, text.trim()),
        };
        let (a, b) = times
            .split_once('-')
            .ok_or_else(|| bad("no `-` between the times"))?;
        let start = minutes(a).map_err(|e| bad(&e))?;
        let end = minutes(b).map_err(|e| bad(&e))?;
        if start == end {
            return Err(bad("the window is empty"));
        }
        Ok(Window { days, start, end })
    }

    /// Whether the moment `weekday` (0 = Monday) at `minute` of the day lies inside.
    pub fn contains(&self, weekday: u32, minute: u32) -> bool {
        let starts_on = |d: u32| self.days & (1 << (d % 7)) != 0;
        if self.start < self.end {
            starts_on(weekday) && (self.start..self.end).contains(&minute)
        } else {
            (starts_on(weekday) && minute >= self.start)
                || (starts_on((weekday + 6) % 7) && minute < self.end)
        }
    }
}

impl fmt::Display for Window {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let days: Vec<&str> = (0..7)
            .filter(|d| self.days & (1 << d) != 0)
            .map(|d| DAYS[d])
            .collect();
        let hm = |m: u32| format!("{:02}:{:02}", m / 60, m % 60);
        write!(f, "{} {}-{}", days.join(","), hm(self.start), hm(self.end))
    }
}

fn day(name: &str) -> Result<u32, String> {
    DAYS.iter()
        .position(|d| d.eq_ignore_ascii_case(name))
        .map(|i| i as u32)
        .ok_or_else(|| format!("`{name}` is not a day (Mon..Sun)"))
}

fn parse_days(text: &str) -> Result<u8, String> {
    let mut mask = 0u8;
    for part in text.split(',') {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let (a, b) = (day(a.trim())?, day(b.trim())?);
        let mut d = a;
        loop {
            mask |= 1 << d;
            if d == b {
                break;
            }
            d = (d + 1) % 7;
        }
    }
    Ok(mask)
}

fn minutes(hm: &str) -> Result<u32, String> {
    let (h, m) = hm.split_once(':').ok_or_else(|| format!("`{hm}` is not HH:MM"))?;
    let (h, m): (u32, u32) = (
        h.parse().map_err(|_| format!("`{hm}` is not HH:MM"))?,
        m.parse().map_err(|_| format!("`{hm}` is not HH:MM"))?,
    );
    if m >= 60 || h > 24 || (h == 24 && m != 0) {
        return Err(format!("`{hm}` is not a time of day"));
    }
    Ok(h * 60 + m)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_window_past_midnight_belongs_to_the_day_it_starts() {
        let w = Window::parse("Mon-Fri 20:00-06:00").unwrap();
        assert!(w.contains(0, 20 * 60), "Monday 20:00");
        assert!(w.contains(1, 5 * 60 + 59), "Tuesday 05:59, from Monday's window");
        assert!(!w.contains(1, 6 * 60), "Tuesday 06:00 is the end");
        assert!(w.contains(5, 60), "Saturday 01:00, from Friday's window");
        assert!(!w.contains(6, 60), "Sunday 01:00: Saturday opens no window");
        assert!(!w.contains(0, 12 * 60));
        let every = Window::parse("02:00-04:00").unwrap();
        assert!((0..7).all(|d| every.contains(d, 3 * 60)));
        let weekend = Window::parse("Sat,Sun 00:00-24:00").unwrap();
        assert!(weekend.contains(6, 23 * 60 + 59) && !weekend.contains(4, 12 * 60));
        assert_eq!(weekend.to_string(), "Sat,Sun 00:00-24:00");
    }

    #[test]
    fn malformed_windows_are_errors_that_quote_them() {
        for bad in [
            "Mon-Fri",
            "Mun 01:00-02:00",
            "25:00-02:00",
            "01:00-01:00",
            "01:60-02:00",
            "1-2",
        ] {
            let e = Window::parse(bad).unwrap_err();
            assert!(e.contains(bad), "{bad}: {e}");
        }
    }
}
