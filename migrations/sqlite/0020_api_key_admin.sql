-- Who made each API key (an operator's username, or `cli:<user>` for the command line) and
-- when it was last used (written every few seconds from each instance's memory, so to within
-- `--metrics-flush-ms`); keys from before this migration have neither.
alter table api_keys add column created_by text;
alter table api_keys add column last_used_at text;
