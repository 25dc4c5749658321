-- A paced number's sends so far, laid end to end 1/send_rate apart, reach
-- until sent_until (the generic cell rate algorithm's theoretical arrival
-- time). ordo.reserve_send lets a send go only while sent_until is at most a
-- small tolerance ahead of now: a slot handed out earlier and redeemed late
-- (a stalled process, a late claim) no longer leaves in the same instant as
-- the on-time slots after it.
ALTER TABLE ordo.send_pacing ADD COLUMN sent_until timestamptz;
