-- dead_letter_parked_again.sql, before each park. Since 20261204000000_redrive.sql.
CREATE OR REPLACE TRIGGER dead_letters_parked_again
    BEFORE INSERT ON highwater.dead_letters
    FOR EACH ROW EXECUTE FUNCTION highwater.dead_letter_parked_again();
