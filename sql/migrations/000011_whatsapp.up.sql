-- The WhatsApp channel: a tenant's sending pause and pacing settings, the
-- send pacing shared by every worker process, and what status webhooks and
-- pair-rate errors leave on a send step.

ALTER TABLE ordo.tenants
    -- Sends per second per phone number (Meta's default throughput is 80);
    -- 0 leaves the number unpaced.
    ADD COLUMN send_rate             int NOT NULL DEFAULT 80 CHECK (send_rate BETWEEN 0 AND 100000),
    -- Minimum gap between two sends to one user (pair rate), in ms; 0 is off.
    ADD COLUMN pair_gap_ms           int NOT NULL DEFAULT 0 CHECK (pair_gap_ms BETWEEN 0 AND 86400000),
    -- Set when Meta refused the tenant's credential or account: its sends
    -- wait until an operator resumes them (ordo.resume_sending).
    ADD COLUMN sending_paused_at     timestamptz,
    ADD COLUMN sending_paused_reason text;

ALTER TABLE ordo.conversations
    -- A send slot reserved on the phone number's pacing and not used yet: the
    -- drain snoozed until it and uses it when it comes back.
    ADD COLUMN send_slot_at  timestamptz,
    -- The earliest time the next send to this user may start: the last
    -- send's answer plus the tenant's pair gap (written by the drain).
    ADD COLUMN pair_ready_at timestamptz;

ALTER TABLE ordo.steps
    -- whatsapp.StatusRank of provider_status: status webhooks never regress it.
    ADD COLUMN provider_status_rank int NOT NULL DEFAULT 0,
    -- Consecutive 131056 (pair rate) errors of the step: its next retry is
    -- 4^(n-1) seconds out.
    ADD COLUMN pair_rate_errors     int NOT NULL DEFAULT 0;

-- One row per business phone number: the next free send slot, handed out
-- one send interval (1 / send_rate) apart by ordo.reserve_send, and how long
-- Meta told the number to back off (throttled_until). Slots reserved before
-- a throttle and falling inside it are given up and reserved again.
CREATE TABLE ordo.send_pacing (
    phone_number_id text PRIMARY KEY,
    next_slot       timestamptz NOT NULL,
    throttled_until timestamptz
);

-- ordo.reserve_send is the one check a drain makes before a send:
--   'paused' — the tenant's sending is paused: do not send;
--   'wait'   — not yet: come back after wait (the conversation keeps any slot
--              it reserved, so waiting never loses its place in line);
--   'go'     — send after wait (at most p_horizon).
-- It enforces the pair gap first (so a user's gap holds no number slot), then
-- takes the conversation's reserved slot or reserves the number's next one
-- with a single atomic upsert. Conversation writes carry the drain's fence.
-- Times are the database's clock; the caller only ever sees durations.
CREATE FUNCTION ordo.reserve_send(
    p_tenant bigint, p_conv bigint, p_fence bigint, p_phone text, p_horizon interval,
    OUT verdict text, OUT wait interval)
LANGUAGE plpgsql AS $$
DECLARE
    v_now    timestamptz := clock_timestamp();
    v_rate   int;
    v_gap    int;
    v_paused timestamptz;
    v_ticket timestamptz;
    v_pair   timestamptz;
    v_until  timestamptz;
    v_slot   timestamptz;
    v_space  interval;
BEGIN
    SELECT t.send_rate, t.pair_gap_ms, t.sending_paused_at INTO v_rate, v_gap, v_paused
    FROM ordo.tenants t WHERE t.id = p_tenant;
    IF NOT FOUND OR v_paused IS NOT NULL THEN
        verdict := 'paused';
        RETURN;
    END IF;
    SELECT c.send_slot_at, c.pair_ready_at INTO v_ticket, v_pair
    FROM ordo.conversations c WHERE c.id = p_conv;

    IF v_ticket IS NOT NULL THEN
        SELECT p.throttled_until INTO v_until FROM ordo.send_pacing p WHERE p.phone_number_id = p_phone;
        IF v_until IS NULL OR v_ticket >= v_until THEN
            v_slot := v_ticket;
        END IF;
    END IF;
    IF v_slot IS NULL THEN
        IF v_gap > 0 AND v_pair > v_now THEN
            verdict := 'wait';
            wait := v_pair - v_now;
            RETURN;
        END IF;
        IF v_rate = 0 THEN
            -- Unpaced, but a throttled number still waits.
            SELECT greatest(p.next_slot, v_now) INTO v_slot FROM ordo.send_pacing p WHERE p.phone_number_id = p_phone;
            v_slot := coalesce(v_slot, v_now);
        ELSE
            v_space := make_interval(secs => 1.0 / v_rate);
            INSERT INTO ordo.send_pacing AS p (phone_number_id, next_slot) VALUES (p_phone, v_now + v_space)
            ON CONFLICT (phone_number_id) DO UPDATE SET next_slot = greatest(p.next_slot, v_now) + v_space
            RETURNING p.next_slot - v_space INTO v_slot;
        END IF;
    END IF;

    IF v_slot - v_now > p_horizon THEN
        IF v_ticket IS DISTINCT FROM v_slot THEN
            UPDATE ordo.conversations c SET send_slot_at = v_slot WHERE c.id = p_conv AND c.fence = p_fence;
        END IF;
        verdict := 'wait';
        wait := v_slot - v_now;
        RETURN;
    END IF;
    IF v_ticket IS NOT NULL THEN
        UPDATE ordo.conversations c SET send_slot_at = NULL WHERE c.id = p_conv AND c.fence = p_fence;
    END IF;
    verdict := 'go';
    wait := greatest(v_slot - v_now, interval '0');
END;
$$;

-- ordo.resume_sending lifts a tenant's sending pause and wakes its
-- conversations' drains, which then go on in order: a snoozed drain is made
-- due now; a drain still running (about to snooze: its snooze is recorded
-- after it returns) is replaced by a new one, which takes the conversation
-- once the old one lets go. False when the tenant's sending was not paused.
CREATE FUNCTION ordo.resume_sending(p_tenant bigint) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE ordo.tenants t SET sending_paused_at = NULL, sending_paused_reason = NULL
    WHERE t.id = p_tenant AND t.sending_paused_at IS NOT NULL;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    UPDATE ordo.river_job j SET state = 'available', scheduled_at = now()
    FROM ordo.conversations c
    WHERE c.tenant_id = p_tenant AND j.id = c.drain_job_id
      AND j.state IN ('scheduled', 'available') AND j.scheduled_at > now();
    PERFORM ordo.ensure_drain(c.id, c.drain_job_id)
    FROM ordo.conversations c JOIN ordo.river_job j ON j.id = c.drain_job_id
    WHERE c.tenant_id = p_tenant AND j.state = 'running';
    PERFORM pg_notify('ordo.river_insert', '{"queue": "ordo"}');
    RETURN true;
END;
$$;
