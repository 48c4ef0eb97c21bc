-- 0008_attempt_class_resend: dial_attempts.class accepts every class the retry policy produces
-- (issue 9; SPEC D2, D4). Applied by `dispatcher migrate` inside one transaction.
--
-- dispatcher/core/retry_policy.h's verdicts are ok, refused, resend (unknown outcome, re-sent
-- with the same key), unknown (no tries left), stop_lane and invalid; 0001 lacked 'resend', so
-- the first 5xx or timeout of a dial could not be recorded.
ALTER TABLE dial_attempts DROP CONSTRAINT dial_attempts_class_check;
ALTER TABLE dial_attempts ADD CONSTRAINT dial_attempts_class_check
    CHECK (class IN ('ok', 'refused', 'resend', 'unknown', 'stop_lane', 'invalid'));
