-- A confirmed settlement is still asked, ever less often, whether its
-- payment came back during the return watch (DESIGN.md section 15): the
-- sweep's index covers it.
DROP INDEX settlements_due_idx;
CREATE INDEX settlements_due_idx ON settlements (next_check_at)
    WHERE state IN ('pending', 'sent', 'uncertain', 'confirmed');
