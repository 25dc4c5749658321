-- ordo.reserve_send is the one check a drain makes before a send:
--   'paused' — the tenant's sending is paused: do not send;
--   'wait'   — not yet: come back after wait (the conversation keeps the slot
--              it waits for, so waiting never loses its place in line);
--   'go'     — send after wait (at most p_horizon).
-- It enforces the pair gap first (pair_ready_at: the tenant's pair gap after
-- a send, or Meta's 131056 schedule after that error; so a user's gap holds
-- no number slot), then
-- takes the conversation's reserved slot or reserves the number's next one
-- with a single atomic upsert; the number's sends so far (sent_until) then
-- space every send 1/send_rate apart, with 50 ms of tolerance for jitter,
-- so a slot redeemed late never leaves in a burst with later ones: a send
-- they hold back takes the number's next slot instead.
-- A conversation a user waits on (its ready row urgent: the user's message,
-- or an answer to it, ordo.enqueue_message) takes no place in that line: it
-- sends at the number's next free moment (sent_until), ahead of the slots
-- a campaign's conversations hold. Behind a line of 20,000 conversations at
-- 80/s a user who wrote in the middle of the campaign waited four minutes
-- for the answer. The number's rate holds: its sends move sent_until like
-- any send, and a campaign slot whose moment one took is held back and
-- re-slotted.
-- Conversation writes carry the drain's fence.
-- Times are the database's clock; the caller only ever sees durations.
--
-- It checks the fence itself (SQLSTATE ORF01 when p_fence is stale) and
-- locks the conversation row (FOR NO KEY UPDATE, as ordo.check_fence) in the
-- one statement that reads the tenant's pacing settings, the conversation's
-- slot and pair gap and the number's pacing row, before it locks the
-- number's send_pacing row (sql/LOCKING.md): one read where there were four
-- (issue 11: a quiet message pays this once per send).
CREATE OR REPLACE FUNCTION ordo.reserve_send(
    p_tenant bigint, p_conv bigint, p_fence bigint, p_phone text, p_horizon interval,
    OUT verdict text, OUT wait interval)
LANGUAGE plpgsql AS $$
DECLARE
    v_now    timestamptz := clock_timestamp();
    v_rate   int;
    v_paused timestamptz;
    v_ticket timestamptz;
    v_pair   timestamptz;
    v_until  timestamptz;
    v_slot   timestamptz;
    v_next   timestamptz;
    v_go     timestamptz;
    v_sent   timestamptz;
    -- how far ahead of now the number's sends may run: jitter, not a burst
    v_jitter interval := interval '50 milliseconds';
    v_found  boolean;
    v_space  interval;
    v_urgent boolean;
BEGIN
    SELECT t.id IS NOT NULL, t.send_rate, t.sending_paused_at,
           c.send_slot_at, c.pair_ready_at, p.throttled_until, p.next_slot, coalesce(r.urgent, false)
    INTO v_found, v_rate, v_paused, v_ticket, v_pair, v_until, v_next, v_urgent
    FROM ordo.conversations c
    LEFT JOIN ordo.tenants t ON t.id = p_tenant
    LEFT JOIN ordo.send_pacing p ON p.phone_number_id = p_phone
    LEFT JOIN ordo.ready r ON r.conversation_pk = c.id
    WHERE c.id = p_conv AND c.fence = p_fence
    FOR NO KEY UPDATE OF c;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'stale fencing token % for conversation %', p_fence, p_conv USING ERRCODE = 'ORF01';
    END IF;
    IF NOT v_found OR v_paused IS NOT NULL THEN
        -- The drain marks its conversation for ordo.resume_sending, and
        -- gives up a slot reserved before the pause (or every conversation
        -- would send at once on resume, a burst above send_rate), through
        -- ordo.wait_for_dependency: it holds the tenant row FOR SHARE while
        -- it marks, so a resume comes wholly before the mark or wholly
        -- after it (ordo.wake_waiting never waits for a row).
        verdict := 'paused';
        RETURN;
    END IF;

    IF v_rate > 0 THEN
        v_space := make_interval(secs => 1.0 / v_rate);
    END IF;
    IF v_ticket IS NOT NULL AND (v_until IS NULL OR v_ticket >= v_until) THEN
        v_slot := v_ticket;
    END IF;
    IF v_slot IS NULL THEN
        -- Whatever the tenant's pair gap: a 131056 error sets pair_ready_at
        -- too (jobs/steps.go holdPairRate), and nothing else may send to
        -- the user before it. (A gap lowered to 0 lets the last one run out.)
        IF v_pair > v_now THEN
            verdict := 'wait';
            wait := v_pair - v_now;
            RETURN;
        END IF;
        IF v_rate = 0 THEN
            -- Unpaced, but a throttled number still waits.
            v_slot := greatest(v_next, v_now);
        ELSIF v_urgent THEN
            -- Not in the line: now, or when a throttle ends; sent_until
            -- below decides (its row made if this is the number's first
            -- send, so that replies alone are spaced too).
            v_slot := greatest(v_now, v_until);
            IF v_next IS NULL THEN
                INSERT INTO ordo.send_pacing (phone_number_id, next_slot) VALUES (p_phone, v_now)
                ON CONFLICT (phone_number_id) DO NOTHING;
            END IF;
        ELSE
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
    IF v_rate > 0 THEN
        -- A slot is a place in line, not a licence: one redeemed late (the
        -- drain stalled, or was claimed late) would leave together with the
        -- on-time slots after it, a burst at Meta. The number's sends so far
        -- (sent_until) space every send, beyond a tolerance for jitter; a
        -- send too early takes a new slot. Read under the row's lock, so two
        -- processes' sends are spaced on one clock.
        SELECT p.sent_until INTO v_sent FROM ordo.send_pacing p WHERE p.phone_number_id = p_phone FOR NO KEY UPDATE;
        v_now := clock_timestamp();
        v_go := greatest(v_slot, v_now);
        IF v_sent - v_jitter > v_go THEN
            IF v_urgent THEN
                -- A user waits: for the number's next free moment, not for
                -- the end of the line.
                v_slot := v_sent - v_jitter;
            ELSE
                -- Too early for the number: a place of its own at the end
                -- of the line, so the drains held back by one late send
                -- come back one by one (told one wait, they came back
                -- together and all but one asked again: n(n+1)/2 asks for
                -- n sends).
                UPDATE ordo.send_pacing p SET next_slot = greatest(p.next_slot, v_sent - v_jitter) + v_space
                WHERE p.phone_number_id = p_phone
                RETURNING p.next_slot - v_space INTO v_slot;
            END IF;
            UPDATE ordo.conversations c SET send_slot_at = v_slot WHERE c.id = p_conv AND c.fence = p_fence;
            verdict := 'wait';
            wait := v_slot - v_now;
            RETURN;
        END IF;
        UPDATE ordo.send_pacing p SET sent_until = greatest(v_sent, v_go) + v_space
        WHERE p.phone_number_id = p_phone;
    END IF;
    IF v_ticket IS NOT NULL THEN
        UPDATE ordo.conversations c SET send_slot_at = NULL WHERE c.id = p_conv AND c.fence = p_fence;
    END IF;
    verdict := 'go';
    wait := greatest(v_slot - v_now, interval '0');
END;
$$;
