package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sandboxd/sandboxd/job"
	"github.com/sandboxd/sandboxd/policy"
)

// The guard's counters on Postgres (job.AtomicSpender): every budget
// window and tool limit is a row of guard_counters holding its count and
// limit, with CHECK (used <= lim); every tenant's rate limit bucket a row
// of guard_rates with CHECK (tokens >= 0). A job's insert and its spends
// are one statement: the spends upsert their rows (the row lock orders
// concurrent spenders, across replicas), and a spend past a limit
// violates the CHECK, which aborts the whole statement, the job's insert
// with it. Only a refusal costs a second round trip, to read what the
// counters hold for the refusal's reason.

const (
	guardCountersCheck = "guard_counters_within_limit"
	guardRatesCheck    = "guard_rates_has_token"
)

// pgGuardMigration is migration 6: the guard's counters. Self-contained
// (IF NOT EXISTS): it may take another number when branches merge, as
// long as no release has it yet.
const pgGuardMigration = `CREATE TABLE IF NOT EXISTS guard_counters (
		tenant       TEXT   NOT NULL,
		session_id   TEXT   NOT NULL,
		key          TEXT   NOT NULL,
		window_ns    BIGINT NOT NULL,
		window_start BIGINT NOT NULL,
		used         BIGINT NOT NULL,
		lim          BIGINT NOT NULL,
		PRIMARY KEY (tenant, session_id, key, window_ns, window_start),
		CONSTRAINT ` + guardCountersCheck + ` CHECK (used <= lim)
	);
	CREATE TABLE IF NOT EXISTS guard_rates (
		tenant  TEXT             PRIMARY KEY,
		tokens  DOUBLE PRECISION NOT NULL,
		last_ns BIGINT           NOT NULL,
		CONSTRAINT ` + guardRatesCheck + ` CHECK (tokens >= 0)
	);`

// spendArrays are a charge's spends as the statement's array parameters.
type spendArrays struct {
	tenant, session, key []string
	window, start, units []int64
	limit                []int64
}

func toSpendArrays(spends []policy.Spend) spendArrays {
	var a spendArrays
	for _, s := range spends {
		a.tenant = append(a.tenant, s.Tenant)
		a.session = append(a.session, s.Session)
		a.key = append(a.key, s.Key)
		a.window = append(a.window, int64(s.Window))
		var start int64
		if s.Window > 0 {
			start = s.WindowStart.UnixNano()
		}
		a.start = append(a.start, start)
		a.units = append(a.units, s.Units)
		a.limit = append(a.limit, s.Limit)
	}
	if a.tenant == nil { // empty arrays, not NULL
		a.tenant, a.session, a.key = []string{}, []string{}, []string{}
		a.window, a.start, a.units, a.limit = []int64{}, []int64{}, []int64{}, []int64{}
	}
	return a
}

// spendArgs are the unnest of a charge's spends in statement q's
// parameters from $first, each with its ordinality o (1-based).
func spendUnnest(first int) string {
	p := func(k int, typ string) string { return fmt.Sprintf("$%d::%s[]", first+k, typ) }
	return `u AS (SELECT * FROM unnest(` + p(0, "text") + `, ` + p(1, "text") + `, ` + p(2, "text") + `, ` +
		p(3, "bigint") + `, ` + p(4, "bigint") + `, ` + p(5, "bigint") + `, ` + p(6, "bigint") + `)
		WITH ORDINALITY AS u(tenant, session_id, key, window_ns, window_start, units, lim, o))`
}

// spendCTEs spend u's units and rate's token where cond holds; rate's
// parameters are $rate (tenant, NULL: no rate limit), $rate+1 (tokens per
// second) and $rate+2 (burst). spent returns each counter's count after.
func spendCTEs(cond string, rate int) string {
	p := func(k int, typ string) string { return fmt.Sprintf("$%d::%s", rate+k, typ) }
	return `spent AS (INSERT INTO guard_counters (tenant, session_id, key, window_ns, window_start, used, lim)
			SELECT tenant, session_id, key, window_ns, window_start, units, lim FROM u WHERE ` + cond + `
			ON CONFLICT (tenant, session_id, key, window_ns, window_start)
			DO UPDATE SET used = guard_counters.used + EXCLUDED.used, lim = EXCLUDED.lim
			RETURNING tenant, session_id, key, window_ns, window_start, used),
		rate AS (INSERT INTO guard_rates (tenant, tokens, last_ns)
			SELECT ` + p(0, "text") + `, ` + p(2, "float8") + ` - 1, ` + dbNow + ` WHERE ` + p(0, "text") + ` IS NOT NULL AND ` + cond + `
			ON CONFLICT (tenant) DO UPDATE SET
				tokens = LEAST(` + p(2, "float8") + `, guard_rates.tokens + GREATEST(0, EXCLUDED.last_ns - guard_rates.last_ns)::float8 / 1e9 * ` + p(1, "float8") + `) - 1,
				last_ns = GREATEST(guard_rates.last_ns, EXCLUDED.last_ns)
			RETURNING 1)`
}

// spentOf joins u's spends with their counts after (spent), by counter.
const spentOf = `u LEFT JOIN spent s ON (s.tenant, s.session_id, s.key, s.window_ns, s.window_start) = (u.tenant, u.session_id, u.key, u.window_ns, u.window_start)`

// CreateSpending implements job.AtomicSpender. The job's guard record is
// stored with its Remaining settled from the counters as spent (the
// charge's Counter), and j.Guard set to what was stored.
func (s *Postgres) CreateSpending(ctx context.Context, j *job.Job, c job.Charge, capacity int, self *job.SelfClaim) ([]int64, bool, error) {
	r, err := toRow(j)
	if err != nil {
		return nil, false, fmt.Errorf("create job %s: %w", j.ID, err)
	}
	if capacity == 0 {
		self = nil // Store.Create's: no replica claims it
	}
	mine, owner, notify := selfClaimSQL(37, 2)
	replica, epoch, limit := selfClaimArgs(self)
	cond := `$24::integer = 0`
	tail := `SELECT guard, (SELECT COALESCE(array_agg(COALESCE(s.used, -1) ORDER BY u.o), '{}') FROM ` + spentOf + `) FROM ins`
	if capacity > 0 {
		cond = `(SELECT count(*) FROM jobs WHERE state = 'queued') < $24`
		tail = `SELECT guard, (SELECT COALESCE(array_agg(COALESCE(s.used, -1) ORDER BY u.o), '{}') FROM ` + spentOf + `),
			` + notify + ` FROM ins`
	}
	a := toSpendArrays(c.Spend)
	var rateTenant *string
	var rate, burst float64
	if c.Rate != nil {
		rateTenant, rate, burst = &c.Rate.Tenant, c.Rate.Rate, c.Rate.Burst
	}
	counter := make([]int32, len(c.Counter))
	for i, k := range c.Counter {
		counter[i] = int32(k)
	}
	// settled is the guard record with each Remaining entry's remaining
	// its limit minus its counter's count after the spend ($35: the
	// entry's spend, 0-based).
	q := `WITH ` + spendUnnest(25) + `, ` + spendCTEs(cond, 32) + `, ` + mine + `,
		settled AS (SELECT CASE WHEN $17::text IS NULL OR cardinality($35::int[]) = 0 THEN $17::text
			ELSE jsonb_set($17::jsonb, '{remaining}', COALESCE((SELECT jsonb_agg(
					CASE WHEN x.used IS NULL THEN e.v
					ELSE jsonb_set(e.v, '{remaining}', to_jsonb(GREATEST(0, (e.v->>'limit')::bigint - x.used))) END
					ORDER BY e.o)
				FROM jsonb_array_elements($17::jsonb->'remaining') WITH ORDINALITY AS e(v, o)
				LEFT JOIN unnest($35::int[]) WITH ORDINALITY AS r(idx, o) ON r.o = e.o
				LEFT JOIN (SELECT u.o, s.used FROM ` + spentOf + `) x ON x.o = r.idx + 1), '[]'::jsonb))::text END AS guard),
		ins AS (INSERT INTO jobs (` + jobColumns + `, owner, owner_epoch)
			SELECT $1::text, $2::text, $3::text, $4::text, $5::text, $6::text, $7::text, $8::text,
				$9::text, $10::text, $11::text, $12::integer, $13::bigint, $14::bigint, $15::bigint, $16::text,
				(SELECT guard FROM settled), $18::text, $19::text, $20::text, $21::text, $22::boolean, $23::text, $36::boolean, ` + owner + `
			FROM mine WHERE ` + cond + `
			RETURNING guard, owner)
		` + tail
	var guard *string
	var used []int64
	var claimed bool
	n, err := s.spendQuery(ctx, q, func(rows pgx.Rows) error {
		if capacity > 0 {
			return rows.Scan(&guard, &used, &claimed, nil)
		}
		return rows.Scan(&guard, &used)
	},
		r.id, r.tenant, r.tool, r.callID, r.args, r.idemKey, r.runner, r.limits,
		r.state, r.reason, r.result, r.attempts, r.createdAt, r.startedAt, r.finishedAt, r.sessionID,
		r.guard, r.egress, r.callback, r.tags, r.metadata, r.cached, r.hooks, capacity,
		a.tenant, a.session, a.key, a.window, a.start, a.units, a.limit,
		rateTenant, rate, burst, counter, r.retry, replica, epoch, limit)
	if refused(err) {
		return nil, false, s.refusal(ctx, "create job "+j.ID, a, c.Rate)
	}
	if pgUnique(err) {
		return nil, false, fmt.Errorf("create job %s: %w: id or idempotency key already used", j.ID, job.ErrConflict)
	}
	if err != nil {
		return nil, false, pgErr("create job "+j.ID, err)
	}
	if n == 0 {
		return nil, false, fmt.Errorf("enqueue job %s: %w (%d queued across replicas)", j.ID, job.ErrQueueFull, capacity)
	}
	if guard != nil && j.Guard != nil {
		var g job.GuardRecord
		if err := json.Unmarshal([]byte(*guard), &g); err != nil {
			return nil, claimed, fmt.Errorf("create job %s: the stored guard record: %w", j.ID, err)
		}
		j.Guard = &g
	}
	return used, claimed, nil
}

// spendQuery runs a spending statement, scanning each row with scan, and
// counts its rows; again (up to twice) when it deadlocked with another
// spender (Postgres rolled it back: nothing was spent).
func (s *Postgres) spendQuery(ctx context.Context, q string, scan func(pgx.Rows) error, args ...any) (int, error) {
	for try := 0; ; try++ {
		rows, err := s.pool.Query(ctx, q, args...)
		n := 0
		if err == nil {
			for rows.Next() {
				if err = scan(rows); err != nil {
					break
				}
				n++
			}
			rows.Close()
			if err == nil {
				err = rows.Err()
			}
		}
		if pgCode(err) == "40P01" && try < 2 {
			continue
		}
		return n, err
	}
}

// refused reports whether err is a spend past a limit (a CHECK of the
// guard's tables).
func refused(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "23514" && (pe.ConstraintName == guardCountersCheck || pe.ConstraintName == guardRatesCheck)
}

// Spend implements job.AtomicSpender.
func (s *Postgres) Spend(ctx context.Context, c job.Charge) ([]int64, error) {
	a := toSpendArrays(c.Spend)
	var rateTenant *string
	var rate, burst float64
	if c.Rate != nil {
		rateTenant, rate, burst = &c.Rate.Tenant, c.Rate.Rate, c.Rate.Burst
	}
	q := `WITH ` + spendUnnest(1) + `, ` + spendCTEs("true", 8) + `
		SELECT COALESCE((SELECT array_agg(COALESCE(s.used, 0) ORDER BY u.o) FROM ` + spentOf + `), '{}'), (SELECT count(*) FROM rate)`
	var used []int64
	var rated int64
	_, err := s.spendQuery(ctx, q, func(rows pgx.Rows) error { return rows.Scan(&used, &rated) },
		a.tenant, a.session, a.key, a.window, a.start, a.units, a.limit, rateTenant, rate, burst)
	if refused(err) {
		return nil, s.refusal(ctx, "spend", a, c.Rate)
	}
	if err != nil {
		return nil, pgErr("spend guard units", err)
	}
	return used, nil
}

// CheckSpend implements job.AtomicSpender: a read of c's counters.
func (s *Postgres) CheckSpend(ctx context.Context, c job.Charge) error {
	a := toSpendArrays(c.Spend)
	err := s.refusal(ctx, "check spend", a, c.Rate)
	var r *job.SpendRefused
	if !errors.As(err, &r) {
		return err
	}
	if c.Rate != nil && r.Spent.Tokens < 1 {
		return err
	}
	for i, used := range r.Spent.Used {
		if used+a.units[i] > a.limit[i] {
			return err
		}
	}
	return nil
}

// refusal reads what the counters of a refused charge hold; op names
// the refused operation.
func (s *Postgres) refusal(ctx context.Context, op string, a spendArrays, rc *policy.RateCharge) error {
	sp := policy.Spent{Used: make([]int64, len(a.tenant)), Tokens: 1}
	var rateTenant *string
	var rate, burst float64
	if rc != nil {
		rateTenant, rate, burst = &rc.Tenant, rc.Rate, rc.Burst
	}
	var used []int64
	var now int64
	err := s.pool.QueryRow(ctx, `SELECT
			COALESCE((SELECT array_agg(COALESCE(g.used, 0) ORDER BY u.o)
				FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::bigint[]) WITH ORDINALITY AS u(tenant, session_id, key, window_ns, window_start, o)
				LEFT JOIN guard_counters g USING (tenant, session_id, key, window_ns, window_start)), '{}'),
			COALESCE((SELECT LEAST($8::float8, tokens + GREATEST(0, `+dbNow+` - last_ns)::float8 / 1e9 * $7::float8)
				FROM guard_rates WHERE tenant = $6::text), $8::float8),
			`+dbNow,
		a.tenant, a.session, a.key, a.window, a.start, rateTenant, rate, burst).Scan(&used, &sp.Tokens, &now)
	if err != nil {
		return pgErr(op+": read the guard's counters", err)
	}
	copy(sp.Used, used)
	if rc == nil {
		sp.Tokens = 1
	}
	sp.Now = time.Unix(0, now).UTC()
	return fmt.Errorf("%s: %w", op, &job.SpendRefused{Spent: sp})
}

// RefundSpends implements job.AtomicSpender.
func (s *Postgres) RefundSpends(ctx context.Context, spends []policy.Spend) ([]int64, error) {
	if len(spends) == 0 {
		return nil, nil
	}
	a := toSpendArrays(spends)
	var used []int64
	err := s.pool.QueryRow(ctx, `WITH back AS (UPDATE guard_counters g SET used = GREATEST(0, g.used - u.units)
			FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::bigint[], $6::bigint[])
				WITH ORDINALITY AS u(tenant, session_id, key, window_ns, window_start, units, o)
			WHERE g.tenant = u.tenant AND g.session_id = u.session_id AND g.key = u.key
				AND g.window_ns = u.window_ns AND g.window_start = u.window_start
			RETURNING u.o, g.used)
		SELECT COALESCE(array_agg(COALESCE(b.used, -1) ORDER BY o.o), '{}')
		FROM generate_series(1, cardinality($1::text[])) AS o(o) LEFT JOIN back b ON b.o = o.o`,
		a.tenant, a.session, a.key, a.window, a.start, a.units).Scan(&used)
	if err != nil {
		return nil, pgErr("refund guard spends", err)
	}
	return used, nil
}

// pruneGuardCounters deletes the counters of budget windows that ended
// and those of sessions no longer open (their tool limits last the
// session's life).
func pruneGuardCounters(ctx context.Context, tx pgx.Tx) error {
	_, err := tx.Exec(ctx, `DELETE FROM guard_counters g WHERE (g.window_ns > 0 AND g.window_start + g.window_ns < `+dbNow+`)
		OR (g.session_id != '' AND NOT EXISTS (SELECT 1 FROM sessions s WHERE s.id = g.session_id AND s.state IN ('creating', 'active')))`)
	return err
}
