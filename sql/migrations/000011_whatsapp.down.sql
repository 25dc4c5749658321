DROP FUNCTION IF EXISTS ordo.resume_sending(bigint);
DROP FUNCTION IF EXISTS ordo.reserve_send(bigint, bigint, bigint, text, interval);
DROP TABLE IF EXISTS ordo.send_pacing;
ALTER TABLE ordo.steps
    DROP COLUMN IF EXISTS pair_rate_errors,
    DROP COLUMN IF EXISTS provider_status_rank;
ALTER TABLE ordo.conversations
    DROP COLUMN IF EXISTS pair_ready_at,
    DROP COLUMN IF EXISTS send_slot_at;
ALTER TABLE ordo.tenants
    DROP COLUMN IF EXISTS sending_paused_reason,
    DROP COLUMN IF EXISTS sending_paused_at,
    DROP COLUMN IF EXISTS pair_gap_ms,
    DROP COLUMN IF EXISTS send_rate;
