//! `top` in a terminal: ratatui on crossterm, keyboard only (works over
//! ssh). The screen is owned by [`Screen`]; dropping it (any return, `?`
//! included) and the panic hook `ratatui::try_init` installs both give
//! the terminal back.

use std::time::Duration;

use anyhow::{Context, Result};
use innoprof::live::{Frame, SortKey};
use innoprof::model::top_symbols::TopSymbols;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Paragraph, Row, Table};
use ratatui::DefaultTerminal;

use super::plain;

/// What a key asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Quit,
    NextSort,
    TogglePause,
    /// The terminal changed size.
    Redraw,
    /// Scroll the wait table (when it has more probes than rows).
    Down,
    Up,
}

/// A key's action, if it has one: q, Esc, Ctrl-C quit (raw mode turns
/// Ctrl-C into a key, not SIGINT); s and Tab cycle the sort; p pauses;
/// j/k or the arrows scroll the wait table.
pub fn action(code: KeyCode, modifiers: KeyModifiers) -> Option<Action> {
    match code {
        KeyCode::Char('c') if modifiers.contains(KeyModifiers::CONTROL) => Some(Action::Quit),
        KeyCode::Char('q') | KeyCode::Char('Q') | KeyCode::Esc => Some(Action::Quit),
        KeyCode::Char('s') | KeyCode::Char('S') | KeyCode::Tab => Some(Action::NextSort),
        KeyCode::Char('p') | KeyCode::Char('P') | KeyCode::Char(' ') => Some(Action::TogglePause),
        KeyCode::Char('j') | KeyCode::Down => Some(Action::Down),
        KeyCode::Char('k') | KeyCode::Up => Some(Action::Up),
        _ => None,
    }
}

/// What the keys have set.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Controls {
    pub sort: SortKey,
    pub paused: bool,
    /// Wait-table rows scrolled past (clamped when drawn).
    pub scroll: usize,
}

impl Controls {
    /// Applies a key's action to the controls and the frame shown (its
    /// rows re-sorted at once, not at the next refresh). `Quit` is the
    /// caller's.
    pub fn apply(&mut self, action: Action, shown: &mut Frame) {
        match action {
            Action::NextSort => {
                self.sort = self.sort.next();
                shown.sort(self.sort);
            }
            Action::TogglePause => self.paused = !self.paused,
            Action::Down => {
                self.scroll = (self.scroll + 1).min(shown.probes.len().saturating_sub(1))
            }
            Action::Up => self.scroll = self.scroll.saturating_sub(1),
            Action::Quit | Action::Redraw => {}
        }
    }
}

/// The terminal in raw mode on the alternate screen, until dropped.
pub struct Screen {
    terminal: DefaultTerminal,
}

impl Screen {
    pub fn enter() -> Result<Self> {
        // try_init installs the restoring panic hook first; if it fails
        // half-way, restore what it changed.
        match ratatui::try_init() {
            Ok(terminal) => Ok(Self { terminal }),
            Err(e) => {
                ratatui::restore();
                Err(e).context("setting up the terminal (try redirecting stdout for plain text)")
            }
        }
    }

    /// The actions of the keys pressed since the last call (never blocks).
    pub fn actions(&mut self) -> Result<Vec<Action>> {
        let mut out = Vec::new();
        while event::poll(Duration::ZERO).context("reading the keyboard")? {
            match event::read().context("reading the keyboard")? {
                Event::Key(k) if k.kind != KeyEventKind::Release => {
                    out.extend(action(k.code, k.modifiers));
                }
                Event::Resize(..) => out.push(Action::Redraw),
                _ => {}
            }
        }
        Ok(out)
    }

    pub fn draw(&mut self, view: &View) -> Result<()> {
        self.terminal
            .draw(|f| render(f, view))
            .context("drawing the terminal")?;
        Ok(())
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        // Quietly: after a hangup there is no terminal left to restore.
        let _ = ratatui::try_restore();
    }
}

/// Everything on the screen.
pub struct View<'a> {
    pub title: &'a str,
    pub frame: &'a Frame,
    pub controls: Controls,
    pub refreshes: u64,
    /// What the CPU panel says while the frame has no profile yet (the
    /// first interval, then the naming of its stacks): None, "not profiled".
    pub cpu_pending: Option<&'a str>,
}

fn bold() -> Style {
    Style::new().add_modifier(Modifier::BOLD)
}

/// Rows for the wait table, the site panels and the CPU table in `height`
/// rows of body: the wait table first (the reason for `top`), up to half
/// of the body unless it fits; then a site panel of at most
/// `SITE_ROWS / 2` rows; the CPU table gets the rest.
fn split_heights(height: u16, probes: usize) -> (u16, u16, u16) {
    let waits = (probes.max(1) as u16 + 3)
        .min((height / 2).max(6))
        .min(height);
    let rest = height - waits;
    let sites = (plain::SITE_ROWS as u16 / 2 + 3).min(rest / 2);
    (waits, sites, rest - sites)
}

fn render(f: &mut ratatui::Frame, v: &View) {
    let frame = v.frame;
    let [head, body, keys] = Layout::vertical([
        Constraint::Length(2),
        Constraint::Fill(1),
        Constraint::Length(1),
    ])
    .areas(f.area());
    let (w, s, c) = split_heights(body.height, frame.probes.len());
    let [waits, sites, cpu] = Layout::vertical([
        Constraint::Length(w),
        Constraint::Length(s),
        Constraint::Length(c),
    ])
    .areas(body);
    // What changes first: the title is the longest and is cut first.
    let state = if v.controls.paused { "[paused]  " } else { "" };
    let heading = vec![
        Line::styled(
            format!(
                "{state}sort: {}  last {:.1} s  #{}  {}",
                v.controls.sort.header(),
                frame.interval_s,
                v.refreshes,
                v.title,
            ),
            bold(),
        ),
        Line::raw(plain::spend(&frame.spend)),
    ];
    f.render_widget(Paragraph::new(heading), head);
    render_waits(f, waits, v);
    let [latches, callsites] =
        // Latch names ("created in buf_block_init (buf0buf.cc:1530)") are
        // longer than call sites ("row0row.cc:1069").
        Layout::horizontal([Constraint::Percentage(55), Constraint::Percentage(45)]).areas(sites);
    render_sites(f, latches, "top latches by wait", "latch", &frame.latches);
    render_sites(
        f,
        callsites,
        "top call sites by wait",
        "call site",
        &frame.callsites,
    );
    render_cpu(f, cpu, frame, v.cpu_pending);
    f.render_widget(
        Paragraph::new("q/Esc quit   s/Tab sort column   p pause   j/k scroll").style(bold()),
        keys,
    );
}

fn render_waits(f: &mut ratatui::Frame, area: Rect, v: &View) {
    let visible = area.height.saturating_sub(3) as usize;
    let skip = v
        .controls
        .scroll
        .min(v.frame.probes.len().saturating_sub(visible));
    let rows = v.frame.probes.iter().skip(skip).map(|r| {
        Row::new([
            r.name.clone(),
            format!("{:>10}", plain::calls(r.calls_per_s)),
            format!(
                "{:>12}",
                if r.timed {
                    plain::wait(r.wait_ns_per_s)
                } else {
                    "-".into()
                }
            ),
            format!("{:>10}", plain::p99(r)),
            format!("{:>4}", plain::on(r)),
        ])
    });
    let h = plain::headers(v.controls.sort);
    let header = Row::new([
        h[0].clone(),
        format!("{:>10}", h[1]),
        format!("{:>12}", h[2]),
        format!("{:>10}", h[3]),
        format!("{:>4}", h[4]),
    ])
    .style(bold());
    // Numbers next to the names, not pushed to the far right.
    let name_width = v
        .frame
        .probes
        .iter()
        .map(|r| r.name.len())
        .max()
        .unwrap_or(0);
    let table = Table::new(
        rows,
        [
            Constraint::Length(name_width.max(5) as u16),
            Constraint::Length(10),
            Constraint::Length(12),
            Constraint::Length(10),
            Constraint::Length(4),
            Constraint::Fill(1),
        ],
    )
    .header(header)
    .block(Block::bordered().title(format!(
        " waits, sorted by {}{} ",
        v.controls.sort.header(),
        if skip > 0 {
            format!(", from #{}", skip + 1)
        } else {
            String::new()
        }
    )));
    f.render_widget(table, area);
}

fn render_sites(
    f: &mut ratatui::Frame,
    area: Rect,
    title: &str,
    what: &str,
    rows: &[innoprof::live::WaitRow],
) {
    let visible = area.height.saturating_sub(3) as usize;
    // Numbers (8 + 12 and the gaps) first; the probe column gets at most
    // a third of what is left, the site or latch name the rest.
    let left = area.width.saturating_sub(2 + 8 + 12 + 3);
    let probe_width = (rows
        .iter()
        .take(visible)
        .map(|r| r.probe.len())
        .max()
        .unwrap_or(0)
        .max(5) as u16)
        .min(left / 3);
    // Too narrow for both (an 80-column terminal): the name matters more.
    let probe_width = if left < 36 { 0 } else { probe_width };
    let body = rows.iter().take(visible).map(|r| {
        let [name, probe, calls, wait] = plain::site_row(r);
        // "created in buf_block_init (…)": the function says it all here.
        let name = name
            .strip_prefix("created in ")
            .map_or(name.clone(), String::from);
        Row::new([name, probe, format!("{calls:>8}"), format!("{wait:>12}")])
    });
    let table = Table::new(
        body,
        [
            Constraint::Length(left.saturating_sub(probe_width)),
            Constraint::Length(probe_width),
            Constraint::Length(8),
            Constraint::Length(12),
        ],
    )
    .header(
        Row::new([
            what.to_string(),
            "probe".into(),
            format!("{:>8}", "calls/s"),
            format!("{:>12}", "wait/s"),
        ])
        .style(bold()),
    )
    .block(Block::bordered().title(format!(" {title} ")));
    f.render_widget(table, area);
}

fn render_cpu(f: &mut ratatui::Frame, area: Rect, frame: &Frame, pending: Option<&str>) {
    let Some(cpu) = &frame.cpu else {
        f.render_widget(
            Paragraph::new(pending.unwrap_or("not profiled"))
                .block(Block::bordered().title(" on-CPU ")),
            area,
        );
        return;
    };
    let on = &cpu.oncpu;
    let title = format!(
        " on-CPU: {} samples, target ran {:.1}% of {} CPUs ",
        on.samples, on.target_cpu_pct, on.cpus
    );
    let visible = area.height.saturating_sub(3) as usize;
    let table = Table::new(
        cpu_rows(&on.top, visible),
        [
            Constraint::Length(7),
            Constraint::Length(8),
            Constraint::Length(18),
            Constraint::Min(20),
        ],
    )
    .header(Row::new(["self %", "total %", "module", "symbol"]).style(bold()))
    .block(Block::bordered().title(title));
    f.render_widget(table, area);
}

fn cpu_rows(top: &TopSymbols, n: usize) -> Vec<Row<'static>> {
    top.rows
        .iter()
        .take(n)
        .map(|r| {
            Row::new([
                format!("{:>6.1}", r.self_pct),
                format!("{:>7.1}", r.total_pct),
                r.module.clone(),
                r.symbol.clone(),
            ])
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys() {
        let none = KeyModifiers::NONE;
        assert_eq!(action(KeyCode::Char('q'), none), Some(Action::Quit));
        assert_eq!(action(KeyCode::Esc, none), Some(Action::Quit));
        assert_eq!(
            action(KeyCode::Char('c'), KeyModifiers::CONTROL),
            Some(Action::Quit)
        );
        assert_eq!(action(KeyCode::Char('c'), none), None);
        assert_eq!(action(KeyCode::Tab, none), Some(Action::NextSort));
        assert_eq!(action(KeyCode::Char('s'), none), Some(Action::NextSort));
        assert_eq!(action(KeyCode::Char('p'), none), Some(Action::TogglePause));
        assert_eq!(action(KeyCode::Down, none), Some(Action::Down));
        assert_eq!(action(KeyCode::Char('k'), none), Some(Action::Up));
    }

    #[test]
    fn controls() {
        let row = |name: &str, calls| innoprof::live::ProbeRow {
            name: name.into(),
            timed: true,
            calls_per_s: calls,
            wait_ns_per_s: 1.0 / calls,
            p99_ns: None,
            on_fraction: 1.0,
        };
        let mut shown = Frame {
            probes: vec![row("a", 1.0), row("b", 2.0)],
            ..Default::default()
        };
        let mut c = Controls::default();
        c.apply(Action::NextSort, &mut shown);
        c.apply(Action::NextSort, &mut shown);
        c.apply(Action::NextSort, &mut shown);
        // wait/s -> p99 -> calls/s -> back to wait/s, rows re-sorted each time.
        assert_eq!(c.sort, SortKey::WaitPerSec);
        assert_eq!(shown.probes[0].name, "a");
        c.apply(Action::NextSort, &mut shown);
        c.apply(Action::NextSort, &mut shown);
        assert_eq!(c.sort, SortKey::CallsPerSec);
        assert_eq!(shown.probes[0].name, "b");
        for _ in 0..5 {
            c.apply(Action::Down, &mut shown);
        }
        assert_eq!(c.scroll, 1);
        c.apply(Action::Up, &mut shown);
        c.apply(Action::Up, &mut shown);
        assert_eq!(c.scroll, 0);
        c.apply(Action::TogglePause, &mut shown);
        assert!(c.paused);
    }

    #[test]
    fn the_wait_table_comes_first_on_small_screens() {
        // 80x24: 21 rows of body.
        assert_eq!(split_heights(21, 10), (10, 5, 6));
        // 200x50: every probe, a full site panel, the CPU table the rest.
        assert_eq!(split_heights(47, 10), (13, 8, 26));
        assert_eq!(split_heights(3, 10), (3, 0, 0));
        assert_eq!(split_heights(0, 0), (0, 0, 0));
    }

    #[test]
    fn the_cpu_panel_says_what_it_waits_for() {
        let text = |pending| {
            let frame = Frame::default();
            let mut t =
                ratatui::Terminal::new(ratatui::backend::TestBackend::new(100, 30)).unwrap();
            let view = View {
                title: "innoprof top",
                frame: &frame,
                controls: Controls::default(),
                refreshes: 0,
                cpu_pending: pending,
            };
            t.draw(|f| render(f, &view)).unwrap();
            t.backend()
                .buffer()
                .content()
                .iter()
                .map(|c| c.symbol())
                .collect::<String>()
        };
        let naming =
            "naming stacks of mysqld (first run on this host: building the symbol index)...";
        assert!(text(Some(naming)).contains(naming));
        assert!(text(None).contains("not profiled"));
    }

    #[test]
    fn draws_on_a_test_backend() {
        let frame = Frame {
            interval_s: 1.0,
            probes: vec![innoprof::live::ProbeRow {
                name: "sql.commit".into(),
                timed: true,
                calls_per_s: 120.0,
                wait_ns_per_s: 3e6,
                p99_ns: Some(1 << 20),
                on_fraction: 1.0,
            }],
            ..Default::default()
        };
        let mut t = ratatui::Terminal::new(ratatui::backend::TestBackend::new(100, 30)).unwrap();
        let view = View {
            title: "innoprof top",
            frame: &frame,
            controls: Controls {
                sort: SortKey::P99,
                paused: true,
                scroll: 5,
            },
            refreshes: 3,
            cpu_pending: None,
        };
        t.draw(|f| render(f, &view)).unwrap();
        let text: String = t
            .backend()
            .buffer()
            .content()
            .chunks(100)
            .map(|l| l.iter().map(|c| c.symbol()).collect::<String>() + "\n")
            .collect();
        assert!(text.contains("sort: p99"), "{text}");
        assert!(text.contains("[paused]"), "{text}");
        assert!(text.contains("*p99"), "{text}");
        assert!(text.contains("sql.commit"), "{text}");
        assert!(text.contains("3.00 ms/s"), "{text}");
    }
}
