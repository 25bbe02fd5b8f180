//! `top` in a terminal: ratatui on crossterm, keyboard only (works over
//! ssh). The screen is owned by [`Screen`]; dropping it (any return, `?`
//! included) and the panic hook `ratatui::try_init` installs both give
//! the terminal back.

use innoprof::text::cut;
use std::time::Duration;

use anyhow::{Context, Result};
use innoprof::live::{Frame, SortKey};
use innoprof::model::top_symbols::TopSymbols;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Block, Paragraph, Row, Table, Wrap};
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
    /// Scroll the table shown (when it has more rows than the screen).
    Down,
    Up,
    /// Show this table (the same again: back to the waits).
    Show(Panel),
}

/// The main table: the probes' waits (with the latch, call-site and CPU
/// panels), or the interval's statements, or its connections.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Panel {
    #[default]
    Waits,
    Statements,
    Connections,
}

/// A key's action, if it has one: q, Esc, Ctrl-C quit (raw mode turns
/// Ctrl-C into a key, not SIGINT); s and Tab cycle the wait table's sort;
/// p pauses; j/k or the arrows scroll; t shows the statements, c the
/// connections, w the waits again.
pub fn action(code: KeyCode, modifiers: KeyModifiers) -> Option<Action> {
    match code {
        KeyCode::Char('c') if modifiers.contains(KeyModifiers::CONTROL) => Some(Action::Quit),
        KeyCode::Char('q') | KeyCode::Char('Q') | KeyCode::Esc => Some(Action::Quit),
        KeyCode::Char('s') | KeyCode::Char('S') | KeyCode::Tab => Some(Action::NextSort),
        KeyCode::Char('p') | KeyCode::Char('P') | KeyCode::Char(' ') => Some(Action::TogglePause),
        KeyCode::Char('j') | KeyCode::Down => Some(Action::Down),
        KeyCode::Char('k') | KeyCode::Up => Some(Action::Up),
        KeyCode::Char('t') | KeyCode::Char('T') => Some(Action::Show(Panel::Statements)),
        KeyCode::Char('c') | KeyCode::Char('C') => Some(Action::Show(Panel::Connections)),
        KeyCode::Char('w') | KeyCode::Char('W') => Some(Action::Show(Panel::Waits)),
        _ => None,
    }
}

/// What the keys have set.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Controls {
    pub sort: SortKey,
    pub paused: bool,
    /// Rows of the table shown scrolled past (clamped when drawn).
    pub scroll: usize,
    pub panel: Panel,
}

/// Rows of the main table of `panel`.
fn rows_of(panel: Panel, frame: &Frame) -> usize {
    let s = frame.statements.as_ref();
    match panel {
        Panel::Waits => frame.probes.len(),
        Panel::Statements => s.map_or(0, |s| s.statements.len()),
        Panel::Connections => s.map_or(0, |s| s.connections.len()),
    }
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
                self.scroll = (self.scroll + 1).min(rows_of(self.panel, shown).saturating_sub(1))
            }
            Action::Up => self.scroll = self.scroll.saturating_sub(1),
            Action::Show(panel) => {
                self.panel = if self.panel == panel {
                    Panel::Waits
                } else {
                    panel
                };
                self.scroll = 0;
            }
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

/// The keys, on the screen's last line.
const KEYS: &str = "q quit  s/Tab sort  p pause  j/k scroll  t statements  c connections  w waits";

fn render(f: &mut ratatui::Frame, v: &View) {
    let frame = v.frame;
    let [head, body, keys] = Layout::vertical([
        Constraint::Length(2),
        Constraint::Fill(1),
        Constraint::Length(1),
    ])
    .areas(f.area());
    // What changes first: the title is the longest and is cut first.
    let state = if v.controls.paused { "[paused]  " } else { "" };
    let (what, interval_s) = match (v.controls.panel, &frame.statements) {
        (Panel::Waits, _) | (_, None) => (
            format!("sort: {}", v.controls.sort.header()),
            frame.interval_s,
        ),
        (Panel::Statements, Some(s)) => ("statements".into(), s.interval_s),
        (Panel::Connections, Some(s)) => ("connections".into(), s.interval_s),
    };
    let heading = vec![
        Line::styled(
            format!(
                "{state}{what}  last {interval_s:.1} s  #{}  {}",
                v.refreshes, v.title,
            ),
            bold(),
        ),
        Line::raw(plain::spend(&frame.spend)),
    ];
    f.render_widget(Paragraph::new(heading), head);
    match v.controls.panel {
        Panel::Waits => render_wait_panels(f, body, v),
        Panel::Statements => render_who(f, body, v, Panel::Statements),
        Panel::Connections => render_who(f, body, v, Panel::Connections),
    }
    f.render_widget(Paragraph::new(KEYS).style(bold()), keys);
}

/// The wait table, the latch and call-site panels and the CPU table.
fn render_wait_panels(f: &mut ratatui::Frame, body: Rect, v: &View) {
    let frame = v.frame;
    let (w, s, c) = split_heights(body.height, frame.probes.len());
    let [waits, sites, cpu] = Layout::vertical([
        Constraint::Length(w),
        Constraint::Length(s),
        Constraint::Length(c),
    ])
    .areas(body);
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
}

/// The statements or the connections of the interval, the whole body:
/// most wait first, then most calls; the last column (fingerprint, top
/// statement) cut at the screen's edge. Where statements are not
/// attributed, why, in place of the table.
fn render_who(f: &mut ratatui::Frame, area: Rect, v: &View, panel: Panel) {
    let name = if panel == Panel::Statements {
        "statements"
    } else {
        "connections"
    };
    let s = match &v.frame.statements {
        Some(s) if s.attributed => s,
        other => {
            let why = other
                .as_ref()
                .map_or("sampling the first interval...", |s| s.how.as_str());
            f.render_widget(
                Paragraph::new(why.to_string())
                    .wrap(Wrap { trim: true })
                    .block(Block::bordered().title(format!(" {name} "))),
                area,
            );
            return;
        }
    };
    let visible = area.height.saturating_sub(3) as usize;
    let total = rows_of(panel, v.frame);
    let skip = v.controls.scroll.min(total.saturating_sub(visible));
    let (headers, cells, columns): (Vec<&str>, Vec<Vec<String>>, Vec<Column>) = match panel {
        Panel::Statements => {
            let cells: Vec<Vec<String>> = s
                .statements
                .iter()
                .skip(skip)
                .take(visible)
                .map(|r| plain::statement_row(r).to_vec())
                .collect();
            let width = |i, min, max| Some(fit(&cells, i, min, max));
            // The fingerprint matters most: the probe's name gets at
            // most a fifth of a narrow screen.
            let probe_max = (area.width as usize / 5).clamp(9, 28);
            let columns = vec![
                (Some(11), true),
                (Some(8), true),
                (Some(7), true),
                (Some(5), true),
                (width(4, 5, 16), false),
                (width(5, 9, probe_max), false),
                (None, false),
            ];
            (plain::STATEMENT_HEADERS.to_vec(), cells, columns)
        }
        _ => {
            let cells: Vec<Vec<String>> = s
                .connections
                .iter()
                .skip(skip)
                .take(visible)
                .map(|r| plain::connection_row(r).to_vec())
                .collect();
            let width = |i, min, max| Some(fit(&cells, i, min, max));
            let columns = vec![
                (width(0, 5, 20), true),
                (width(1, 4, 16), false),
                (width(2, 4, 24), false),
                (width(3, 4, 16), false),
                (Some(11), true),
                (Some(8), true),
                (None, false),
            ];
            (plain::CONNECTION_HEADERS.to_vec(), cells, columns)
        }
    };
    // The last column gets the rest of the line (inside the borders, one
    // space between columns); every cell is cut to its column with `…`.
    let fixed: usize = columns
        .iter()
        .map(|(w, _)| w.map_or(0, usize::from) + 1)
        .sum::<usize>()
        - 1;
    let rest = (area.width as usize).saturating_sub(2 + fixed);
    let align = |text: &str, (w, number): (Option<u16>, bool)| {
        let w = w.map_or(rest, usize::from);
        let text = cut(text, w);
        if number {
            format!("{text:>w$}")
        } else {
            text
        }
    };
    let header = Row::new(
        headers
            .iter()
            .zip(&columns)
            .map(|(h, c)| align(h, *c))
            .collect::<Vec<_>>(),
    )
    .style(bold());
    let rows = cells.iter().map(|r| {
        Row::new(
            r.iter()
                .zip(&columns)
                .map(|(cell, c)| align(cell, *c))
                .collect::<Vec<_>>(),
        )
    });
    let widths: Vec<Constraint> = columns
        .iter()
        .map(|(w, _)| w.map_or(Constraint::Fill(1), Constraint::Length))
        .collect();
    let mut notes = plain::statements_notes(s, v.frame.spend.probes_cut);
    if total == 0 {
        notes.insert(0, "no statement hit a probe in the interval".into());
    }
    let mut block = Block::bordered().title(format!(
        " {name}, last {:.1} s, most wait first{} ",
        s.interval_s,
        if skip > 0 {
            format!(", from #{}", skip + 1)
        } else {
            String::new()
        }
    ));
    if !notes.is_empty() {
        block = block.title_bottom(format!(" {} ", notes.join("; ")));
    }
    f.render_widget(Table::new(rows, widths).header(header).block(block), area);
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

/// A column of the statements or connections table: its width (None:
/// the last column, the rest of the line) and whether it is a number
/// (right-aligned).
type Column = (Option<u16>, bool);

/// The width of column `i` of `cells`: its widest cell, within [min, max].
fn fit(cells: &[Vec<String>], i: usize, min: usize, max: usize) -> u16 {
    cells
        .iter()
        .map(|c| c[i].chars().count())
        .max()
        .unwrap_or(0)
        .clamp(min, max) as u16
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
        assert_eq!(
            action(KeyCode::Char('c'), none),
            Some(Action::Show(Panel::Connections))
        );
        assert_eq!(
            action(KeyCode::Char('t'), none),
            Some(Action::Show(Panel::Statements))
        );
        assert_eq!(
            action(KeyCode::Char('w'), none),
            Some(Action::Show(Panel::Waits))
        );
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
                panel: Panel::Waits,
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

    fn screen(frame: &Frame, controls: Controls, width: u16) -> String {
        let mut t = ratatui::Terminal::new(ratatui::backend::TestBackend::new(width, 30)).unwrap();
        let view = View {
            title: "innoprof top",
            frame,
            controls,
            refreshes: 2,
            cpu_pending: None,
        };
        t.draw(|f| render(f, &view)).unwrap();
        t.backend()
            .buffer()
            .content()
            .chunks(width as usize)
            .map(|l| l.iter().map(|c| c.symbol()).collect::<String>() + "\n")
            .collect()
    }

    fn who_frame() -> Frame {
        use innoprof::live::statements::{ConnectionRow, StatementRow, Statements};
        let statement = |fingerprint: &str, wait, calls| StatementRow {
            id: "x".into(),
            fingerprint: fingerprint.into(),
            wait_ns_per_s: wait,
            calls_per_s: calls,
            executions_per_s: calls / 2.0,
            connections: 2,
            users: Vec::new(),
            top_probe: Some("innodb.redo.write_up_to".into()),
        };
        Frame {
            interval_s: 1.0,
            statements: Some(Statements {
                interval_s: 1.0,
                attributed: true,
                how: "THD from TLS".into(),
                statements: vec![
                    statement("UPDATE sbtest1 SET k=k+? WHERE id=?", 4e6, 300.0),
                    statement(
                        &format!(
                            "SELECT c FROM sbtest1 WHERE id IN (?+){}",
                            " AND k=?".repeat(40)
                        ),
                        1e3,
                        20.0,
                    ),
                ],
                connections: vec![ConnectionRow {
                    id: 42,
                    user: None,
                    host: None,
                    db: None,
                    wait_ns_per_s: 4e6,
                    calls_per_s: 320.0,
                    top_statement: Some("UPDATE sbtest1 SET k=k+? WHERE id=?".into()),
                }],
                named: false,
                unattributed_per_s: 0.0,
            }),
            ..Default::default()
        }
    }

    #[test]
    fn t_and_c_switch_tables_and_back() {
        let mut shown = who_frame();
        let mut c = Controls::default();
        c.apply(Action::Down, &mut shown);
        assert_eq!(c.scroll, 0, "no probe rows to scroll");
        c.apply(Action::Show(Panel::Statements), &mut shown);
        assert_eq!(c.panel, Panel::Statements);
        // Scrolls the statements: two rows.
        for _ in 0..3 {
            c.apply(Action::Down, &mut shown);
        }
        assert_eq!(c.scroll, 1);
        c.apply(Action::Show(Panel::Connections), &mut shown);
        assert_eq!((c.panel, c.scroll), (Panel::Connections, 0));
        c.apply(Action::Show(Panel::Connections), &mut shown);
        assert_eq!(c.panel, Panel::Waits);
        c.apply(Action::Show(Panel::Statements), &mut shown);
        c.apply(Action::Show(Panel::Waits), &mut shown);
        assert_eq!(c.panel, Panel::Waits);
    }

    #[test]
    fn the_statements_and_connections_tables() {
        let frame = who_frame();
        let controls = Controls {
            panel: Panel::Statements,
            ..Controls::default()
        };
        let text = screen(&frame, controls, 100);
        assert!(text.contains("statements  last 1.0 s  #2"), "{text}");
        assert!(
            text.contains("statements, last 1.0 s, most wait first"),
            "{text}"
        );
        for h in plain::STATEMENT_HEADERS {
            assert!(text.contains(h), "{h}: {text}");
        }
        let update = text
            .lines()
            .find(|l| l.contains("UPDATE sbtest1 SET"))
            .unwrap_or_else(|| panic!("{text}"));
        // The probe's name is cut to a fifth of the screen.
        for cell in ["4.00 ms/s", "300", "150", "innodb.redo.write_u…"] {
            assert!(update.contains(cell), "{cell}: {update}");
        }
        // The long fingerprint is cut at the edge, the table stays one
        // line a row.
        let lines: Vec<&str> = text.lines().collect();
        let select = lines
            .iter()
            .position(|l| l.contains("SELECT c FROM sbtest1"))
            .unwrap();
        assert!(lines[select].ends_with("…│"), "{text}");
        assert!(!lines[select + 1].contains("AND k"), "{text}");
        assert!(text.contains("no processlist"), "{text}");
        assert!(text.contains("connections by id"), "{text}");
        assert!(
            text.contains("t statements  c connections  w waits"),
            "{text}"
        );
        // The wait table is not drawn.
        assert!(!text.contains("on-CPU"), "{text}");

        let controls = Controls {
            panel: Panel::Connections,
            ..Controls::default()
        };
        let text = screen(&frame, controls, 100);
        for h in plain::CONNECTION_HEADERS {
            assert!(text.contains(h), "{h}: {text}");
        }
        let row = text
            .lines()
            .find(|l| l.contains(" 42 "))
            .unwrap_or_else(|| panic!("{text}"));
        for cell in ["4.00 ms/s", "320", "UPDATE sbtest1"] {
            assert!(row.contains(cell), "{cell}: {row}");
        }
    }

    #[test]
    fn cells_are_cut_with_an_ellipsis() {
        assert_eq!(cut("abcdef", 6), "abcdef");
        assert_eq!(cut("abcdef", 4), "abc…");
        assert_eq!(cut("abcdef", 0), "");
    }

    #[test]
    fn why_statements_are_not_attributed_in_place_of_the_table() {
        let frame = Frame {
            statements: Some(innoprof::live::statements::Statements::not_attributed(
                "statements not attributed: no DWARF".into(),
            )),
            ..Default::default()
        };
        for panel in [Panel::Statements, Panel::Connections] {
            let controls = Controls {
                panel,
                ..Controls::default()
            };
            let text = screen(&frame, controls, 100);
            assert!(
                text.contains("statements not attributed: no DWARF"),
                "{text}"
            );
            assert!(!text.contains("fingerprint"), "{text}");
        }
    }
}
