-- `idem_refuse(reason)` raises an error whose message is `reason`: a statement that writes
-- several tables at once (a data-modifying `with`) and runs as its own transaction, without
-- BEGIN and COMMIT, calls it when part of its work cannot happen, so that the whole statement
-- writes nothing (plain SQL has no way to raise; a VOLATILE function is never evaluated
-- ahead of its CASE branch, which a constant expression could be, at plan time).
create function idem_refuse(reason text) returns integer language plpgsql volatile as $$
begin
    raise exception using errcode = 'P0001', message = reason;
end
$$;
