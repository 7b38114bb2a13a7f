"""The PostgreSQL schema of alarmtop, as ordered migrations with a version row.

Everything lives in the schema `alarmtop` (an object's own SQL runs in a schema of
its own, made on first use): alarm rows, execution logs, history, the ledger, the
audit log, object key-values and intents, and the fleet's shard leases and nodes.
Epoch milliseconds are BIGINT. Never edit a released entry: append one.
"""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING

from alarmtop.core.model.errors import InvalidArgument, StorageError
from alarmtop.core.storage.tables import bulk_tables

if TYPE_CHECKING:
    from alarmtop.core.storage.postgres.database import PgConn

SCHEMA = "alarmtop"
WRAPPERS = "alarmtop_sql"  # object_sql.WRAPPERS: the wrappers of object SQL

MIGRATIONS: list[str] = [
    f"""
    CREATE TABLE {SCHEMA}.alarms (
        object_class TEXT NOT NULL,
        object_name TEXT NOT NULL,
        shard INTEGER NOT NULL,
        scheduled_ms BIGINT NOT NULL,
        state TEXT NOT NULL,
        retry_count INTEGER NOT NULL,
        next_attempt_ms BIGINT,
        last_error TEXT,
        attempts TEXT,
        started_ms BIGINT,
        gen BIGINT NOT NULL DEFAULT 0,
        hint_ms BIGINT,
        hint_gen BIGINT NOT NULL DEFAULT 0,
        in_file BOOLEAN NOT NULL DEFAULT FALSE,
        attempt_count INTEGER NOT NULL DEFAULT 0,
        due_ms BIGINT,
        PRIMARY KEY (object_class, object_name)
    );
    CREATE INDEX alarms_due ON {SCHEMA}.alarms (shard, due_ms) WHERE due_ms IS NOT NULL;
    CREATE INDEX alarms_state ON {SCHEMA}.alarms (state);
    CREATE TABLE {SCHEMA}.objects (
        object_class TEXT NOT NULL,
        object_name TEXT NOT NULL,
        file TEXT NOT NULL,
        created_ms BIGINT NOT NULL,
        PRIMARY KEY (object_class, object_name)
    );
    CREATE TABLE {SCHEMA}.object_kv (
        object_class TEXT NOT NULL,
        object_name TEXT NOT NULL,
        key TEXT NOT NULL,
        value TEXT NOT NULL,
        PRIMARY KEY (object_class, object_name, key)
    );
    CREATE TABLE {SCHEMA}.object_intents (
        object_class TEXT NOT NULL,
        object_name TEXT NOT NULL,
        gen BIGINT NOT NULL,
        at_ms BIGINT,
        PRIMARY KEY (object_class, object_name)
    );
    CREATE TABLE {SCHEMA}.executions (
        id TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        version TEXT NOT NULL,
        status TEXT NOT NULL,
        created_ms BIGINT NOT NULL,
        updated_ms BIGINT NOT NULL,
        data TEXT NOT NULL
    );
    CREATE INDEX executions_status ON {SCHEMA}.executions (status, updated_ms);
    CREATE TABLE {SCHEMA}.operations (
        execution_id TEXT NOT NULL,
        op_id TEXT NOT NULL,
        data TEXT NOT NULL,
        PRIMARY KEY (execution_id, op_id)
    );
    CREATE TABLE {SCHEMA}.history (
        execution_id TEXT NOT NULL,
        event_id INTEGER NOT NULL,
        data TEXT NOT NULL,
        PRIMARY KEY (execution_id, event_id)
    );
    CREATE TABLE {SCHEMA}.ledger (
        key TEXT PRIMARY KEY,
        value TEXT,
        at_ms BIGINT NOT NULL,
        deliveries INTEGER NOT NULL
    );
    CREATE TABLE {SCHEMA}.audit (
        seq BIGSERIAL PRIMARY KEY,
        at_ms BIGINT NOT NULL,
        actor TEXT NOT NULL,
        role TEXT,
        action TEXT NOT NULL,
        target TEXT,
        reason TEXT,
        ok BOOLEAN NOT NULL,
        detail TEXT,
        node TEXT
    );
    CREATE TABLE {SCHEMA}.shards (
        shard INTEGER PRIMARY KEY,
        owner TEXT,
        epoch BIGINT NOT NULL DEFAULT 0,
        expires_ms BIGINT NOT NULL DEFAULT 0,
        offered_to TEXT  -- handed over to this node: others wait until expires_ms
    );
    CREATE TABLE {SCHEMA}.nodes (
        node_id TEXT PRIMARY KEY,
        address TEXT,
        started_ms BIGINT NOT NULL,
        renewed_ms BIGINT NOT NULL,
        stopped_ms BIGINT
    );
    CREATE TABLE {SCHEMA}.leases (
        name TEXT PRIMARY KEY,
        owner TEXT,
        epoch BIGINT NOT NULL DEFAULT 0,
        expires_ms BIGINT NOT NULL DEFAULT 0
    );
    """,
    # The values ctx.now()/ctx.random() gave an execution, and every pending timer of
    # every execution, written with each checkpoint (as on SQLite).
    f"""
    CREATE TABLE {SCHEMA}.execution_marks (
        execution_id TEXT NOT NULL,
        key TEXT NOT NULL,
        value TEXT NOT NULL,
        PRIMARY KEY (execution_id, key)
    );
    CREATE TABLE {SCHEMA}.execution_timers (
        execution_id TEXT NOT NULL,
        op_id TEXT NOT NULL,
        kind TEXT NOT NULL,
        due_ms BIGINT NOT NULL,
        name TEXT,
        PRIMARY KEY (execution_id, op_id, kind)
    );
    CREATE INDEX execution_timers_due ON {SCHEMA}.execution_timers
        (due_ms, execution_id, op_id, kind);
    """,
    # Work the fleet does once, not once per node (a cron fire, the dead-letter
    # reminder): the first node to insert the row runs it.
    f"""
    CREATE TABLE {SCHEMA}.fleet_once (
        name TEXT NOT NULL,
        at_ms BIGINT NOT NULL,
        node_id TEXT NOT NULL,
        PRIMARY KEY (name, at_ms)
    );
    CREATE TABLE {SCHEMA}.faults (
        fault_id TEXT PRIMARY KEY,
        node_id TEXT NOT NULL,
        data TEXT NOT NULL
    );
    """,
    # Operator tools (as on SQLite): an alarm's pause, the timers board's order over
    # every shard (the due index leads with the shard), and bulk batches with their
    # items.
    f"""
    ALTER TABLE {SCHEMA}.alarms ADD COLUMN paused_ms BIGINT;
    CREATE INDEX alarms_board ON {SCHEMA}.alarms (due_ms, object_class, object_name)
        WHERE due_ms IS NOT NULL;
    CREATE INDEX alarms_paused ON {SCHEMA}.alarms (next_attempt_ms, object_class, object_name)
        WHERE paused_ms IS NOT NULL;
    """ + bulk_tables(f"{SCHEMA}.", "BIGINT", ""),
    # Listings served by indexes, counts kept with the writes (as on SQLite; the sort
    # keys are core/storage/keys.py's, here generated columns over the rows).
    #
    # The names are compared byte by byte ("C"), as SQLite and Python compare them: a
    # page's cursor and the console's merge of it with what it holds mean one order.
    #
    # `counters` holds the counts the header and /metrics show, changed by triggers in
    # the transaction of the write: exact after any crash, and seen by every node.
    # Each count is split by `slot` and summed when read: a write adds to the slot of
    # the connection that makes it (`alarmtop.slot`, set by each node's committer
    # from its node id), so nodes never wait for each other's counter rows, nor
    # deadlock on them.
    #
    # `known` is every object with a database, an alarm row or an execution, with where
    # it is known from (`sources`: 1 a database, 2 an alarm row, 4 an execution).
    f"""
    ALTER TABLE {SCHEMA}.alarms ALTER COLUMN object_class TYPE TEXT COLLATE "C",
        ALTER COLUMN object_name TYPE TEXT COLLATE "C";
    ALTER TABLE {SCHEMA}.objects ALTER COLUMN object_class TYPE TEXT COLLATE "C",
        ALTER COLUMN object_name TYPE TEXT COLLATE "C";
    ALTER TABLE {SCHEMA}.executions ALTER COLUMN id TYPE TEXT COLLATE "C",
        ALTER COLUMN name TYPE TEXT COLLATE "C";
    ALTER TABLE {SCHEMA}.alarms ADD COLUMN urgency BIGINT GENERATED ALWAYS AS (
        (CASE state WHEN 'dead' THEN 0 WHEN 'retrying' THEN 1 WHEN 'running' THEN 2
         ELSE 3 END)::BIGINT * 1152921504606846976
        + (16383 - least(greatest(retry_count, 0), 16383))::BIGINT * 70368744177664
        + (CASE WHEN next_attempt_ms IS NULL THEN 0
           ELSE least(greatest(next_attempt_ms + 35184372088832, 1), 70368744177663) END)
    ) STORED;
    CREATE INDEX alarms_urgency ON {SCHEMA}.alarms (urgency, object_class, object_name);
    DROP INDEX {SCHEMA}.alarms_state;
    CREATE INDEX alarms_state ON {SCHEMA}.alarms (state, object_class, object_name);
    ALTER TABLE {SCHEMA}.executions ADD COLUMN urgency BIGINT GENERATED ALWAYS AS (
        (CASE status WHEN 'needs_human' THEN 0 WHEN 'failed' THEN 1 WHEN 'running' THEN 2
         WHEN 'suspended' THEN 3 ELSE 4 END)::BIGINT * 1152921504606846976
        + (70368744177663 - least(greatest(updated_ms + 35184372088832, 1), 70368744177663))
    ) STORED;
    DROP INDEX {SCHEMA}.executions_status;
    CREATE INDEX executions_urgency ON {SCHEMA}.executions (urgency, id);
    CREATE INDEX executions_status_urgency ON {SCHEMA}.executions (status, urgency, id);

    CREATE TABLE {SCHEMA}.known (
        object_class TEXT COLLATE "C" NOT NULL,
        object_name TEXT COLLATE "C" NOT NULL,
        sources INTEGER NOT NULL,
        PRIMARY KEY (object_class, object_name)
    );
    INSERT INTO {SCHEMA}.known SELECT object_class, object_name, 1 FROM {SCHEMA}.objects
        ON CONFLICT (object_class, object_name) DO UPDATE
        SET sources = {SCHEMA}.known.sources | EXCLUDED.sources;
    INSERT INTO {SCHEMA}.known SELECT object_class, object_name, 2 FROM {SCHEMA}.alarms
        ON CONFLICT (object_class, object_name) DO UPDATE
        SET sources = {SCHEMA}.known.sources | EXCLUDED.sources;
    INSERT INTO {SCHEMA}.known SELECT 'Execution', id, 4 FROM {SCHEMA}.executions
        ON CONFLICT (object_class, object_name) DO UPDATE
        SET sources = {SCHEMA}.known.sources | EXCLUDED.sources;

    CREATE TABLE {SCHEMA}.counters (
        kind TEXT COLLATE "C" NOT NULL,
        name TEXT COLLATE "C" NOT NULL,
        num INTEGER NOT NULL,
        slot INTEGER NOT NULL,
        n BIGINT NOT NULL,
        PRIMARY KEY (kind, name, num, slot)
    );
    INSERT INTO {SCHEMA}.counters SELECT 'alarms', state, 0, 0, count(*)
        FROM {SCHEMA}.alarms GROUP BY state;
    INSERT INTO {SCHEMA}.counters SELECT 'retries', object_class, retry_count, 0, count(*)
        FROM {SCHEMA}.alarms WHERE retry_count > 0 AND state IN ('retrying', 'running')
        GROUP BY object_class, retry_count;
    INSERT INTO {SCHEMA}.counters SELECT 'executions', status, 0, 0, count(*)
        FROM {SCHEMA}.executions GROUP BY status;
    INSERT INTO {SCHEMA}.counters VALUES
        ('objects', 'stored', 0, 0, (SELECT count(*) FROM {SCHEMA}.objects)),
        ('objects', 'known', 0, 0, (SELECT count(*) FROM {SCHEMA}.known));

    CREATE FUNCTION {SCHEMA}.slot() RETURNS INTEGER LANGUAGE sql STABLE AS
        $$ SELECT coalesce(nullif(current_setting('alarmtop.slot', true), ''), '0')::INTEGER $$;
    CREATE FUNCTION {SCHEMA}.bump(k TEXT, nm TEXT, nu INTEGER, sl INTEGER, d BIGINT)
        RETURNS VOID LANGUAGE sql AS $$
        INSERT INTO {SCHEMA}.counters (kind, name, num, slot, n) VALUES (k, nm, nu, sl, d)
        ON CONFLICT (kind, name, num, slot) DO UPDATE SET n = {SCHEMA}.counters.n + EXCLUDED.n
    $$;
    CREATE FUNCTION {SCHEMA}.know(c TEXT, nm TEXT, src INTEGER, sl INTEGER)
        RETURNS VOID LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO {SCHEMA}.known VALUES (c, nm, src) ON CONFLICT DO NOTHING;
        IF FOUND THEN
            PERFORM {SCHEMA}.bump('objects', 'known', 0, sl, 1);
        ELSE
            UPDATE {SCHEMA}.known SET sources = sources | src
                WHERE object_class = c AND object_name = nm AND sources & src = 0;
        END IF;
    END $$;
    CREATE FUNCTION {SCHEMA}.unknow(c TEXT, nm TEXT, src INTEGER, sl INTEGER)
        RETURNS VOID LANGUAGE plpgsql AS $$
    BEGIN
        DELETE FROM {SCHEMA}.known WHERE object_class = c AND object_name = nm
            AND sources = src;
        IF FOUND THEN
            PERFORM {SCHEMA}.bump('objects', 'known', 0, sl, -1);
        ELSE
            UPDATE {SCHEMA}.known SET sources = sources & ~src
                WHERE object_class = c AND object_name = nm;
        END IF;
    END $$;

    CREATE FUNCTION {SCHEMA}.alarms_counted() RETURNS TRIGGER LANGUAGE plpgsql AS $$
    DECLARE sl INTEGER := {SCHEMA}.slot();
    BEGIN
        IF TG_OP <> 'INSERT' THEN
            PERFORM {SCHEMA}.bump('alarms', OLD.state, 0, sl, -1);
            IF OLD.retry_count > 0 AND OLD.state IN ('retrying', 'running') THEN
                PERFORM {SCHEMA}.bump('retries', OLD.object_class, OLD.retry_count, sl, -1);
            END IF;
        END IF;
        IF TG_OP <> 'DELETE' THEN
            PERFORM {SCHEMA}.bump('alarms', NEW.state, 0, sl, 1);
            IF NEW.retry_count > 0 AND NEW.state IN ('retrying', 'running') THEN
                PERFORM {SCHEMA}.bump('retries', NEW.object_class, NEW.retry_count, sl, 1);
            END IF;
        END IF;
        IF TG_OP = 'INSERT' THEN
            PERFORM {SCHEMA}.know(NEW.object_class, NEW.object_name, 2, sl);
        ELSIF TG_OP = 'DELETE' THEN
            PERFORM {SCHEMA}.unknow(OLD.object_class, OLD.object_name, 2, sl);
        END IF;
        RETURN NULL;
    END $$;
    CREATE TRIGGER alarms_insert_counted AFTER INSERT OR DELETE ON {SCHEMA}.alarms
        FOR EACH ROW EXECUTE FUNCTION {SCHEMA}.alarms_counted();
    CREATE TRIGGER alarms_update_counted AFTER UPDATE ON {SCHEMA}.alarms FOR EACH ROW
        WHEN (OLD.state IS DISTINCT FROM NEW.state
              OR OLD.retry_count IS DISTINCT FROM NEW.retry_count)
        EXECUTE FUNCTION {SCHEMA}.alarms_counted();

    CREATE FUNCTION {SCHEMA}.executions_counted() RETURNS TRIGGER LANGUAGE plpgsql AS $$
    DECLARE sl INTEGER := {SCHEMA}.slot();
    BEGIN
        IF TG_OP = 'UPDATE' THEN
            PERFORM {SCHEMA}.bump('executions', OLD.status, 0, sl, -1);
        ELSE
            PERFORM {SCHEMA}.know('Execution', NEW.id, 4, sl);
        END IF;
        PERFORM {SCHEMA}.bump('executions', NEW.status, 0, sl, 1);
        RETURN NULL;
    END $$;
    CREATE TRIGGER executions_insert_counted AFTER INSERT ON {SCHEMA}.executions
        FOR EACH ROW EXECUTE FUNCTION {SCHEMA}.executions_counted();
    CREATE TRIGGER executions_update_counted AFTER UPDATE ON {SCHEMA}.executions FOR EACH ROW
        WHEN (OLD.status IS DISTINCT FROM NEW.status)
        EXECUTE FUNCTION {SCHEMA}.executions_counted();

    CREATE FUNCTION {SCHEMA}.objects_counted() RETURNS TRIGGER LANGUAGE plpgsql AS $$
    DECLARE sl INTEGER := {SCHEMA}.slot();
    BEGIN
        PERFORM {SCHEMA}.bump('objects', 'stored', 0, sl, 1);
        PERFORM {SCHEMA}.know(NEW.object_class, NEW.object_name, 1, sl);
        RETURN NULL;
    END $$;
    CREATE TRIGGER objects_insert_counted AFTER INSERT ON {SCHEMA}.objects
        FOR EACH ROW EXECUTE FUNCTION {SCHEMA}.objects_counted();
    """,
    # `bump` in PL/pgSQL: a SQL function called from a trigger is planned again at
    # every call, PL/pgSQL keeps its plan for the session. Every counted change of an
    # alarm row or an execution calls it once or twice: a state change of one alarm
    # row took about 40 us less of PostgreSQL's time.
    f"""
    CREATE OR REPLACE FUNCTION {SCHEMA}.bump(k TEXT, nm TEXT, nu INTEGER, sl INTEGER, d BIGINT)
        RETURNS VOID LANGUAGE plpgsql AS $$
    BEGIN
        INSERT INTO {SCHEMA}.counters (kind, name, num, slot, n) VALUES (k, nm, nu, sl, d)
        ON CONFLICT (kind, name, num, slot) DO UPDATE SET n = {SCHEMA}.counters.n + EXCLUDED.n;
    END $$;
    """,
    # Which process runs as a node (a random id per start): two started with the same
    # node id took each other's shards at every lease round.
    f"""
    ALTER TABLE {SCHEMA}.nodes ADD COLUMN incarnation TEXT;
    """,
    # A cancel's reason, kept with the batch: the node that takes the command may not
    # be the one that runs the batch and writes its end.
    f"""
    ALTER TABLE {SCHEMA}.bulk_batches ADD COLUMN cancel_reason TEXT;
    """,
    # The walls of object SQL (object_sql.py): each object's schema belongs to a role
    # of its own, with no right on this schema nor on another object's; its statements
    # run in a SECURITY DEFINER function of that role, kept in a schema no object may
    # name. `object_sql_ready` makes what is missing (a schema made before the walls is
    # handed to its role, with what it holds), and puts the schema on the path of the
    # event's transaction. Called by the runtime's own role.
    f"""
    CREATE SCHEMA {WRAPPERS};
    REVOKE ALL ON SCHEMA {WRAPPERS} FROM PUBLIC;
    CREATE FUNCTION {SCHEMA}.object_sql_ready(sch TEXT, rol TEXT) RETURNS VOID
        LANGUAGE plpgsql AS $$
    DECLARE
        owner_name TEXT;
        obj RECORD;
        body TEXT;
        guc TEXT := ' SET synchronous_commit FROM CURRENT SET statement_timeout FROM CURRENT'
                    ' SET lock_timeout FROM CURRENT'
                    ' SET idle_in_transaction_session_timeout FROM CURRENT';
    BEGIN
        IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles WHERE rolname = rol) THEN
            BEGIN
                EXECUTE format('CREATE ROLE %I NOLOGIN NOINHERIT', rol);
            EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
            END;
        END IF;
        IF NOT (SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname = current_user)
                AND NOT pg_catalog.pg_has_role(current_user, rol, 'MEMBER') THEN
            EXECUTE format('GRANT %I TO %I', rol, current_user);
        END IF;
        SELECT pg_catalog.pg_get_userbyid(nspowner) INTO owner_name
            FROM pg_catalog.pg_namespace WHERE nspname = sch;
        IF owner_name IS NULL THEN
            EXECUTE format('CREATE SCHEMA %I AUTHORIZATION %I', sch, rol);
        ELSIF owner_name <> rol THEN
            EXECUTE format('ALTER SCHEMA %I OWNER TO %I', sch, rol);
            FOR obj IN SELECT c.relname, c.relkind FROM pg_catalog.pg_class c
                    JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
                    WHERE n.nspname = sch AND c.relkind IN ('r', 'p', 'v', 'm', 'f', 'S')
                    AND pg_catalog.pg_get_userbyid(c.relowner) <> rol LOOP
                BEGIN
                    EXECUTE format('ALTER TABLE %I.%I OWNER TO %I', sch, obj.relname, rol);
                EXCEPTION WHEN OTHERS THEN NULL;  -- a table's own sequence moved with it
                END;
            END LOOP;
            FOR obj IN SELECT p.oid::regprocedure AS sig FROM pg_catalog.pg_proc p
                    JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
                    WHERE n.nspname = sch LOOP
                EXECUTE format('ALTER ROUTINE %s OWNER TO %I', obj.sig, rol);
            END LOOP;
            FOR obj IN SELECT t.typname FROM pg_catalog.pg_type t
                    JOIN pg_catalog.pg_namespace n ON n.oid = t.typnamespace
                    WHERE n.nspname = sch AND t.typtype IN ('e', 'd', 'r')
                    OR (n.nspname = sch AND t.typtype = 'c' AND NOT EXISTS (
                        SELECT 1 FROM pg_catalog.pg_class c WHERE c.oid = t.typrelid
                        AND c.relkind <> 'c')) LOOP
                EXECUTE format('ALTER TYPE %I.%I OWNER TO %I', sch, obj.typname, rol);
            END LOOP;
        END IF;
        IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n
                       ON n.oid = p.pronamespace WHERE n.nspname = '{WRAPPERS}'
                       AND p.proname = 'q_' || rol) THEN
            -- Defence in depth: no object may name this schema, so none can alter its
            -- wrapper; one that was not SECURITY DEFINER any more would run as the
            -- caller: it refuses to.
            body := 'BEGIN IF current_user OPERATOR(pg_catalog.=) session_user THEN '
                    'RAISE EXCEPTION ''this object''''s SQL wrapper is not SECURITY DEFINER''; '
                    'END IF; ';
            EXECUTE format('CREATE FUNCTION {WRAPPERS}.%I(q TEXT, a TEXT[]) RETURNS SETOF '
                           'RECORD LANGUAGE plpgsql SECURITY DEFINER SET search_path TO %I'
                           '%s AS %L', 'q_' || rol, sch, guc,
                           body || 'RETURN QUERY EXECUTE q USING a; END');
            EXECUTE format('CREATE FUNCTION {WRAPPERS}.%I(q TEXT, a TEXT[]) RETURNS BIGINT '
                           'LANGUAGE plpgsql SECURITY DEFINER SET search_path TO %I'
                           '%s AS %L', 'x_' || rol, sch, guc,
                           'DECLARE n BIGINT; ' || body || 'EXECUTE q USING a; '
                           'GET DIAGNOSTICS n = ROW_COUNT; RETURN n; END');
            EXECUTE format('REVOKE ALL ON FUNCTION {WRAPPERS}.%I(TEXT, TEXT[]) FROM PUBLIC',
                           'q_' || rol);
            EXECUTE format('REVOKE ALL ON FUNCTION {WRAPPERS}.%I(TEXT, TEXT[]) FROM PUBLIC',
                           'x_' || rol);
            -- A new owner needs CREATE on the function's schema (a superuser needs
            -- nothing): granted for these two statements only, inside this transaction,
            -- so no other session ever sees the object's role with it.
            PERFORM pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext('alarmtop-wrappers'));
            EXECUTE format('GRANT CREATE ON SCHEMA {WRAPPERS} TO %I', rol);
            EXECUTE format('ALTER FUNCTION {WRAPPERS}.%I(TEXT, TEXT[]) OWNER TO %I',
                           'q_' || rol, rol);
            EXECUTE format('ALTER FUNCTION {WRAPPERS}.%I(TEXT, TEXT[]) OWNER TO %I',
                           'x_' || rol, rol);
            EXECUTE format('REVOKE CREATE ON SCHEMA {WRAPPERS} FROM %I', rol);
        END IF;
        PERFORM pg_catalog.set_config('search_path', pg_catalog.quote_ident(sch), true);
    END $$;
    """,
    # The Lambda API (DESIGN section 15): executions listed by function, newest first,
    # paged by key on an index (ListDurableExecutionsByFunction); and an execution
    # deleted with its data (DeleteDurableExecution), its counts and its place among
    # the objects known going with it.
    f"""
    CREATE INDEX executions_function ON {SCHEMA}.executions (name, created_ms, id);
    CREATE FUNCTION {SCHEMA}.executions_deleted() RETURNS TRIGGER LANGUAGE plpgsql AS $$
    DECLARE sl INTEGER := {SCHEMA}.slot();
    BEGIN
        PERFORM {SCHEMA}.bump('executions', OLD.status, 0, sl, -1);
        PERFORM {SCHEMA}.unknow('Execution', OLD.id, 4, sl);
        RETURN NULL;
    END $$;
    CREATE TRIGGER executions_delete_counted AFTER DELETE ON {SCHEMA}.executions
        FOR EACH ROW EXECUTE FUNCTION {SCHEMA}.executions_deleted();
    """,
]


def statements(script: str) -> list[str]:
    """The statements of a script: split at each `;` outside a dollar-quoted body (a
    function's body holds semicolons of its own)."""
    out, start, inside = [], 0, False
    i = 0
    while i < len(script):
        if script.startswith("$$", i):
            inside = not inside
            i += 2
            continue
        if script[i] == ";" and not inside:
            out.append(script[start:i])
            start = i + 1
        i += 1
    out.append(script[start:])
    return [s.strip() for s in out if s.strip()]


async def migrate(conn: PgConn) -> None:
    """Bring alarmtop's schema up to date (one node at a time)."""
    async with conn.transaction():
        # One node migrates at a time; the others wait here, then find it done.
        await conn.execute("SELECT pg_advisory_xact_lock(hashtext('alarmtop-migrate'))")
        await conn.execute(f"CREATE SCHEMA IF NOT EXISTS {SCHEMA}")
        await conn.execute(f"CREATE TABLE IF NOT EXISTS {SCHEMA}.meta "
                           "(key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        version = int(await conn.fetchval(
            f"SELECT value FROM {SCHEMA}.meta WHERE key = 'schema'") or 0)
        if version > len(MIGRATIONS):
            raise StorageError(f"the database's alarmtop schema is version {version}, newer "
                               f"than this alarmtop knows ({len(MIGRATIONS)}); upgrade "
                               "alarmtop on this node", "postgresql")
        for number, script in enumerate(MIGRATIONS[version:], start=version + 1):
            for stmt in statements(script):
                await conn.execute(stmt)
            await conn.execute(f"INSERT INTO {SCHEMA}.meta (key, value) VALUES ('schema', $1) "
                               "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
                               str(number))


async def check_shards(conn: PgConn, shards: int) -> None:
    """Record the shard count at first start; refuse a node started with another."""
    async with conn.transaction():
        stored = await conn.fetchval(f"SELECT value FROM {SCHEMA}.meta WHERE key = 'shards'")
        if stored is None:
            await conn.execute(f"INSERT INTO {SCHEMA}.meta (key, value) VALUES ('shards', $1) "
                               "ON CONFLICT DO NOTHING", str(shards))
            await conn.executemany(f"INSERT INTO {SCHEMA}.shards (shard) VALUES ($1) "
                                   "ON CONFLICT DO NOTHING",
                                   [(i,) for i in range(shards)])
            stored = await conn.fetchval(
                f"SELECT value FROM {SCHEMA}.meta WHERE key = 'shards'")
    if int(stored) != shards:
        raise InvalidArgument(f"this database was set up with {stored} shards; this node was "
                              f"started with {shards}: start it with shards={stored} "
                              "(the shard count of a fleet cannot change)")


async def install_id(conn: PgConn) -> str:
    """This database's own id (made by the first node): objects' roles are named from
    it, since roles belong to the cluster and two databases may hold the same object."""
    await conn.execute(f"INSERT INTO {SCHEMA}.meta (key, value) VALUES ('install_id', $1) "
                       "ON CONFLICT DO NOTHING", secrets.token_hex(8))
    value: str = await conn.fetchval(f"SELECT value FROM {SCHEMA}.meta WHERE key = "
                                     "'install_id'")
    return value


async def cluster_secret(conn: PgConn) -> str:
    """The cluster's secret for node-to-node calls, made by the first node."""
    await conn.execute(f"INSERT INTO {SCHEMA}.meta (key, value) VALUES ('cluster_secret', $1) "
                       "ON CONFLICT DO NOTHING", secrets.token_urlsafe(32))
    value: str = await conn.fetchval(f"SELECT value FROM {SCHEMA}.meta WHERE key = "
                                     "'cluster_secret'")
    return value
