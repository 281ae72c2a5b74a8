//! The SQL expressions behind every generated function, for one layout and one dialect.
//!
//! Each method takes its operands as SQL text (a parameter name, a column, `:unix_ms`) and
//! returns a fully parenthesised expression, so the result can be pasted anywhere: the
//! dialects disagree on the precedence of `<<`, `>>`, `&` and `|` (SQLite gives them one
//! level, MySQL four). Every intermediate value stays within `0 .. 2^63` for an ID of the
//! layout, so no dialect overflows or wraps.
//!
//! MySQL and MariaDB compute bit operators on *unsigned* 64-bit integers, so there the
//! expressions divide and take remainders by powers of two instead (`DIV`, `%`), which
//! stay signed; PostgreSQL and SQLite shift and mask.
//!
//! Nothing here checks that a value is an ID of the sequence (the shard hash of a
//! `shardBits` layout is not recomputed): the functions read fields, as the sidecar's
//! `/decode` does after its check.

use kubeflake_crds::Layout;
use kubeflake_crds::layout::Spread;
use kubeflake_crds::sequence::SequenceParams;

use crate::cli::Dialect;

/// The expressions of one sequence's layout in one dialect.
#[derive(Debug, Clone, Copy)]
pub struct Exprs {
    pub dialect: Dialect,
    pub layout: Layout,
    /// The epoch in Unix milliseconds (at most 2^63 - 1: it comes from an RFC 3339 time).
    epoch_ms: i128,
    unit_ms: i128,
}

fn pow2(bits: u32) -> i128 {
    1i128 << bits
}

impl Exprs {
    pub fn new(dialect: Dialect, params: &SequenceParams) -> Exprs {
        Exprs {
            dialect,
            layout: params.layout,
            epoch_ms: params.timebase.epoch_unix_ms().into(),
            unit_ms: params.timebase.unit().millis().into(),
        }
    }

    fn mysql(&self) -> bool {
        self.dialect == Dialect::Mysql
    }

    /// Bits below the timestamp: datacenter, worker and sequence.
    pub fn low_bits(&self) -> u32 {
        u32::from(self.layout.datacenter_bits())
            + u32::from(self.layout.worker_bits())
            + u32::from(self.layout.sequence_bits())
    }

    /// `x >> bits` of a non-negative `x`.
    fn shr(&self, x: &str, bits: u32) -> String {
        match (bits, self.mysql()) {
            (0, _) => x.to_string(),
            (_, true) => format!("({x} DIV {})", pow2(bits)),
            (_, false) => format!("({x} >> {bits})"),
        }
    }

    /// The low `bits` bits of a non-negative `x`.
    fn low(&self, x: &str, bits: u32) -> String {
        if self.mysql() {
            format!("({x} % {})", pow2(bits))
        } else {
            format!("({x} & {})", pow2(bits) - 1)
        }
    }

    /// The time-ordered key of the ID `id`: the ID itself for time-ordered layouts, the ID
    /// without its shard bits, or its bits reversed back.
    pub fn key(&self, id: &str) -> String {
        match self.layout.spread() {
            Spread::TimeOrdered => id.to_string(),
            Spread::ShardBits { .. } => self.low(id, self.layout.value_bits()),
            Spread::BitReversed => self.reversed(id),
        }
    }

    /// The low `total_bits` bits of `id` in reverse order, one term per bit: bit `i` moves
    /// to bit `total - 1 - i`. No dialect has a builtin for it; every term is below 2^63.
    fn reversed(&self, id: &str) -> String {
        let total = self.layout.total_bits();
        let terms: Vec<String> = (0..total)
            .map(|i| {
                let to = total - 1 - i;
                let bit = if self.mysql() {
                    format!("({} % 2)", self.shr(id, i))
                } else {
                    format!("({} & 1)", self.shr(id, i))
                };
                match (to, self.mysql()) {
                    (0, _) => bit,
                    (_, true) => format!("({bit} * {})", pow2(to)),
                    (_, false) => format!("({bit} << {to})"),
                }
            })
            .collect();
        let join = if self.mysql() { "\n    + " } else { "\n    | " };
        format!("({})", terms.join(join))
    }

    /// The tick an ID was issued in.
    fn tick(&self, id: &str) -> String {
        self.shr(&self.key(id), self.low_bits())
    }

    /// Unix milliseconds of the start of the ID's tick.
    pub fn unix_ms(&self, id: &str) -> String {
        let tick = self.tick(id);
        let scaled = match self.unit_ms {
            1 => tick,
            unit => format!("({tick} * {unit})"),
        };
        format!("({} + {scaled})", self.epoch_ms)
    }

    pub fn worker(&self, id: &str) -> String {
        let seq = u32::from(self.layout.sequence_bits());
        let shifted = self.shr(&self.key(id), seq);
        self.low(&shifted, self.layout.worker_bits().into())
    }

    /// The datacenter field (`0` when the layout has no datacenter bits).
    pub fn datacenter(&self, id: &str) -> String {
        let bits = u32::from(self.layout.datacenter_bits());
        if bits == 0 {
            return "0".to_string();
        }
        let below = u32::from(self.layout.sequence_bits()) + u32::from(self.layout.worker_bits());
        let shifted = self.shr(&self.key(id), below);
        self.low(&shifted, bits)
    }

    /// The shard (the bits above the time-ordered value); only for `shardBits` layouts.
    pub fn shard(&self, id: &str) -> String {
        self.shr(id, self.layout.value_bits())
    }

    /// The largest shard, for `shardBits` layouts.
    pub fn max_shard(&self) -> i128 {
        pow2(self.layout.spread().shard_bits().into()) - 1
    }

    /// The first Unix millisecond the timestamp bits can no longer hold; `None` when that
    /// is beyond a signed 64-bit millisecond count (every argument is then in range).
    fn end_ms(&self) -> Option<i128> {
        let end = self.epoch_ms + pow2(self.layout.timestamp_bits().into()) * self.unit_ms;
        (end <= i128::from(i64::MAX)).then_some(end)
    }

    /// The smallest (`last == false`) or largest key of the tick containing the Unix
    /// millisecond `ms`. Before the epoch: the bounds of tick -1, below every key (so
    /// `key >= min` holds for every ID and `key <= max` for none). At or after the end of
    /// the timestamp bits: NULL.
    pub fn key_bound(&self, ms: &str, last: bool) -> String {
        let low = pow2(self.low_bits());
        let (before, add) = if last {
            ("-1".to_string(), format!(" + {}", low - 1))
        } else {
            (format!("-{low}"), String::new())
        };
        let since = format!("({ms} - {})", self.epoch_ms);
        let tick = match (self.unit_ms, self.mysql()) {
            (1, _) => since,
            (unit, true) => format!("({since} DIV {unit})"),
            (unit, false) => format!("({since} / {unit})"),
        };
        let after = match self.end_ms() {
            Some(end) => format!(" WHEN {ms} >= {end} THEN NULL"),
            None => String::new(),
        };
        format!(
            "(CASE WHEN {ms} < {epoch} THEN {before}{after} ELSE ({tick} * {low}){add} END)",
            epoch = self.epoch_ms
        )
    }

    /// The smallest or largest ID of the tick containing `ms`: the key bounds for layouts
    /// whose IDs order by time, the key bounds under `shard` (NULL outside 0 ..
    /// 2^shardBits - 1) for `shardBits` layouts. `None` for bit-reversed layouts, whose IDs
    /// of one time are no range.
    pub fn id_bound(&self, ms: &str, shard: &str, last: bool) -> Option<String> {
        let key = self.key_bound(ms, last);
        match self.layout.spread() {
            Spread::TimeOrdered => Some(key),
            Spread::ShardBits { .. } => Some(format!(
                "(CASE WHEN {shard} < 0 OR {shard} > {max} THEN NULL ELSE ({shard} * {top}) + {key} END)",
                max = self.max_shard(),
                top = pow2(self.layout.value_bits()),
            )),
            Spread::BitReversed => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kubeflake_crds::layout::SequenceStart;
    use kubeflake_crds::{TimeUnit, Timebase};

    fn params(layout: Layout) -> SequenceParams {
        let mut p = kubeflake_crds::IdSequenceSpec::default().params().unwrap();
        p.layout = layout;
        p.timebase = Timebase::new(1_735_689_600_000, TimeUnit::TenMilliseconds);
        p
    }

    #[test]
    fn mysql_expressions_divide_where_the_others_shift_so_they_stay_signed() {
        let layout = Layout::default();
        let pg = Exprs::new(Dialect::Postgresql, &params(layout));
        let my = Exprs::new(Dialect::Mysql, &params(layout));
        assert_eq!(pg.worker("id"), "((id >> 12) & 1023)");
        assert_eq!(my.worker("id"), "((id DIV 4096) % 1024)");
        assert_eq!(pg.unix_ms("id"), "(1735689600000 + ((id >> 22) * 10))");
        assert_eq!(pg.datacenter("id"), "0");
    }

    #[test]
    fn a_bit_reversed_key_has_one_term_per_bit_and_the_top_bit_comes_from_bit_0() {
        let layout = Layout::with_form(
            [41, 0, 10, 12],
            63,
            Spread::BitReversed,
            SequenceStart::Zero,
        )
        .unwrap();
        let key = Exprs::new(Dialect::Sqlite, &params(layout)).key("id");
        assert_eq!(key.matches("& 1)").count(), 63);
        assert!(key.starts_with("(((id & 1) << 62)"), "{key}");
        assert!(key.ends_with("((id >> 62) & 1))"), "{key}");
    }

    #[test]
    fn time_bounds_are_null_only_past_the_end_of_the_timestamp_bits() {
        let pg = Exprs::new(Dialect::Postgresql, &params(Layout::default()));
        let min = pg.key_bound("ms", false);
        assert!(
            min.contains("WHEN ms < 1735689600000 THEN -4194304"),
            "{min}"
        );
        let end = 1_735_689_600_000i128 + (1i128 << 41) * 10;
        assert!(
            min.contains(&format!("WHEN ms >= {end} THEN NULL")),
            "{min}"
        );
        // 55 timestamp bits of whole seconds end after the largest i64 millisecond.
        let mut p = params(Layout::new(55, 0, 8, 0, 63).unwrap());
        p.timebase = Timebase::new(0, TimeUnit::Second);
        let far = Exprs::new(Dialect::Postgresql, &p).key_bound("ms", true);
        assert!(!far.contains("NULL"), "{far}");
    }
}
