//! Maintenance windows (seed 004, "Policy Engine": update suppression during maintenance
//! windows), exactly as cats-sma-policy.yang models them: a one-off absolute interval or a
//! weekly recurring window (days, UTC start time, duration up to a week).

use chrono::{DateTime, Utc};

const DAY: i64 = 86_400;
const WEEK: i64 = 7 * DAY;
/// 1970-01-05T00:00:00Z, the first Monday of the Unix epoch.
const FIRST_MONDAY: i64 = 4 * DAY;

/// Which updates a window suppresses (YANG leaf `suppress`); read by the Update Controller.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Suppress {
    /// Routine updates; critical triggers (health changes, withdrawals) still go out.
    #[default]
    NonCritical,
    /// Every update.
    All,
}

/// Days of the week, bit 0 = Monday … bit 6 = Sunday (the YANG `days` bit positions).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Weekdays(u8);

impl Weekdays {
    const NAMES: [&'static str; 7] = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"];

    /// From the bit mask; bits above 6 are ignored.
    pub fn from_bits(bits: u8) -> Weekdays {
        Weekdays(bits & 0x7f)
    }

    pub fn bits(self) -> u8 {
        self.0
    }

    /// From the YANG bits value, e.g. `"monday friday"`; `None` on an unknown name.
    pub fn parse(s: &str) -> Option<Weekdays> {
        let mut bits = 0u8;
        for word in s.split_whitespace() {
            let day = Weekdays::NAMES.iter().position(|n| *n == word)?;
            bits |= 1 << day;
        }
        Some(Weekdays(bits))
    }

    /// Day 0 = Monday.
    pub fn contains(self, day: u8) -> bool {
        day < 7 && self.0 & (1 << day) != 0
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }
}

/// Time of day in UTC (YANG typedef `time-of-day`, `HH:MM`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct TimeOfDay {
    minute_of_day: u16,
}

impl TimeOfDay {
    pub fn new(hour: u8, minute: u8) -> Option<TimeOfDay> {
        (hour < 24 && minute < 60).then(|| TimeOfDay { minute_of_day: u16::from(hour) * 60 + u16::from(minute) })
    }

    /// Parses `HH:MM`.
    pub fn parse(s: &str) -> Option<TimeOfDay> {
        let (h, m) = s.split_once(':')?;
        if h.len() != 2 || m.len() != 2 || !h.bytes().chain(m.bytes()).all(|b| b.is_ascii_digit()) {
            return None;
        }
        TimeOfDay::new(h.parse().ok()?, m.parse().ok()?)
    }

    pub fn hour(self) -> u8 {
        (self.minute_of_day / 60) as u8
    }

    pub fn minute(self) -> u8 {
        (self.minute_of_day % 60) as u8
    }
}

/// The YANG `choice schedule`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Schedule {
    /// Active in `[start, end)`.
    Absolute { start: DateTime<Utc>, end: DateTime<Utc> },
    /// Opens on each of `days` at `start` (UTC) for `duration_minutes` (1..=10080); a
    /// window may run past midnight and past the end of the week.
    Recurring { days: Weekdays, start: TimeOfDay, duration_minutes: u32 },
}

/// One `maintenance-window` list entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MaintenanceWindow {
    pub name: String,
    pub schedule: Schedule,
    pub suppress: Suppress,
}

/// A wall-clock instant with the position in the week precomputed, so that testing many
/// windows costs a few integer operations each.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Instant {
    pub now: DateTime<Utc>,
    /// Seconds since the start of Monday (UTC) of the current week.
    week_second: i64,
}

impl Instant {
    pub fn new(now: DateTime<Utc>) -> Instant {
        Instant { now, week_second: (now.timestamp() - FIRST_MONDAY).rem_euclid(WEEK) }
    }
}

impl MaintenanceWindow {
    /// Whether the window is open at `now`.
    pub fn is_active(&self, now: DateTime<Utc>) -> bool {
        self.active_at(&Instant::new(now))
    }

    /// The first instant after `now` at which the window opens or closes, if any: when the
    /// engine must re-evaluate maintenance suppression and `Time IN Maintenance_Window`.
    pub fn next_edge(&self, now: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match &self.schedule {
            Schedule::Absolute { start, end } => [*start, *end].into_iter().filter(|t| *t > now).min(),
            Schedule::Recurring { days, start, duration_minutes } => {
                let t = now.timestamp();
                let week_start = t - (t - FIRST_MONDAY).rem_euclid(WEEK);
                let duration = i64::from(*duration_minutes) * 60;
                let start_s = i64::from(start.minute_of_day) * 60;
                // Openings of the previous, this and the next week cover every edge within
                // a week of now (a window lasts at most a week).
                (-1..=1i64)
                    .flat_map(|w| (0..7u8).filter(|d| days.contains(*d)).map(move |d| (w, d)))
                    .flat_map(|(w, d)| {
                        let open = week_start + w * WEEK + i64::from(d) * DAY + start_s;
                        [open, open + duration]
                    })
                    .filter(|e| *e > t)
                    .min()
                    .and_then(|e| DateTime::from_timestamp(e, 0))
            }
        }
    }

    pub(crate) fn active_at(&self, t: &Instant) -> bool {
        match &self.schedule {
            Schedule::Absolute { start, end } => *start <= t.now && t.now < *end,
            Schedule::Recurring { days, start, duration_minutes } => {
                let duration = i64::from(*duration_minutes) * 60;
                // Seconds since the opening on Monday, then since each later day's opening;
                // one division for all seven days.
                let since_monday = (t.week_second - i64::from(start.minute_of_day) * 60).rem_euclid(WEEK);
                (0..7u8).any(|day| {
                    let opening = i64::from(day) * DAY;
                    let since =
                        if since_monday >= opening { since_monday - opening } else { since_monday - opening + WEEK };
                    days.contains(day) && since < duration
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        s.parse().unwrap()
    }

    fn recurring(days: &str, start: &str, duration_minutes: u32) -> MaintenanceWindow {
        MaintenanceWindow {
            name: "w".into(),
            schedule: Schedule::Recurring {
                days: Weekdays::parse(days).unwrap(),
                start: TimeOfDay::parse(start).unwrap(),
                duration_minutes,
            },
            suppress: Suppress::NonCritical,
        }
    }

    #[test]
    fn yang_absolute_window_is_half_open() {
        let w = MaintenanceWindow {
            name: "upgrade".into(),
            schedule: Schedule::Absolute { start: at("2026-03-01T02:00:00Z"), end: at("2026-03-01T04:00:00Z") },
            suppress: Suppress::All,
        };
        assert!(!w.is_active(at("2026-03-01T01:59:59Z")));
        assert!(w.is_active(at("2026-03-01T02:00:00Z")));
        assert!(w.is_active(at("2026-03-01T03:59:59Z")));
        assert!(!w.is_active(at("2026-03-01T04:00:00Z")));
    }

    #[test]
    fn yang_recurring_window_opens_on_its_days_only() {
        // 2026-03-02 is a Monday.
        let w = recurring("monday wednesday", "02:00", 60);
        assert!(w.is_active(at("2026-03-02T02:30:00Z")));
        assert!(!w.is_active(at("2026-03-03T02:30:00Z")));
        assert!(w.is_active(at("2026-03-04T02:00:00Z")));
        assert!(!w.is_active(at("2026-03-04T03:00:00Z")));
        assert!(!w.is_active(at("2026-03-02T01:59:59Z")));
    }

    #[test]
    fn yang_recurring_window_runs_past_midnight_and_past_sunday() {
        let w = recurring("sunday", "23:00", 120);
        assert!(w.is_active(at("2026-03-08T23:30:00Z")));
        assert!(w.is_active(at("2026-03-09T00:59:59Z")), "Monday 00:59 belongs to Sunday's window");
        assert!(!w.is_active(at("2026-03-09T01:00:00Z")));
        let whole_week = recurring("tuesday", "00:00", 10080);
        assert!(whole_week.is_active(at("2026-03-02T12:00:00Z")));
    }

    #[test]
    fn next_edges_of_absolute_and_recurring_windows() {
        let w = MaintenanceWindow {
            name: "upgrade".into(),
            schedule: Schedule::Absolute { start: at("2026-03-01T02:00:00Z"), end: at("2026-03-01T04:00:00Z") },
            suppress: Suppress::All,
        };
        assert_eq!(w.next_edge(at("2026-03-01T00:00:00Z")), Some(at("2026-03-01T02:00:00Z")));
        assert_eq!(w.next_edge(at("2026-03-01T02:00:00Z")), Some(at("2026-03-01T04:00:00Z")));
        assert_eq!(w.next_edge(at("2026-03-01T04:00:00Z")), None);
        // Monday and Wednesday 02:00 for an hour; 2026-03-02 is a Monday.
        let r = recurring("monday wednesday", "02:00", 60);
        assert_eq!(r.next_edge(at("2026-03-02T01:00:00Z")), Some(at("2026-03-02T02:00:00Z")));
        assert_eq!(r.next_edge(at("2026-03-02T02:10:00Z")), Some(at("2026-03-02T03:00:00Z")));
        assert_eq!(r.next_edge(at("2026-03-02T03:00:00Z")), Some(at("2026-03-04T02:00:00Z")));
        assert_eq!(r.next_edge(at("2026-03-05T00:00:00Z")), Some(at("2026-03-09T02:00:00Z")));
        // A Sunday window running into Monday closes in the next week.
        let s = recurring("sunday", "23:00", 120);
        assert_eq!(s.next_edge(at("2026-03-08T23:30:00Z")), Some(at("2026-03-09T01:00:00Z")));
        // Every edge found is a real change of state.
        let mut t = at("2026-03-01T00:00:00Z");
        for _ in 0..10 {
            let e = r.next_edge(t).unwrap();
            assert_ne!(r.is_active(e - chrono::Duration::seconds(1)), r.is_active(e));
            t = e;
        }
    }

    #[test]
    fn yang_days_and_time_of_day_parse() {
        assert_eq!(Weekdays::parse("monday sunday").unwrap().bits(), 0b100_0001);
        assert_eq!(Weekdays::parse("funday"), None);
        assert_eq!(TimeOfDay::parse("23:59").map(|t| (t.hour(), t.minute())), Some((23, 59)));
        assert_eq!(TimeOfDay::parse("24:00"), None);
        assert_eq!(TimeOfDay::parse("2:00"), None);
        assert_eq!(TimeOfDay::parse("+1:00"), None);
    }
}
