
# 014_extension_update.pl - the extension's versions: 1.0 updated to 1.1
# keeps its state and ends up as a fresh 1.1, and 1.1 lives in any schema.
#
# 1. Database "upd" gets 1.0 (CREATE EXTENSION zklock VERSION '1.0', from
#    zklock--1.0.sql, the script of the v1.0 tag: tools/frozen.sh keeps them
#    identical), which may only live in schema public.  With 1.0: session A
#    holds a session lock, five queue items are committed, two participants
#    arrive.  Session B runs ALTER EXTENSION zklock UPDATE TO '1.1' while A
#    holds its lock.  Afterwards A still holds it (same token, still
#    exclusive: B's try fails, B gets it once A unlocks), the five items are
#    dequeued exactly once (a second dequeue finds nothing, the length is
#    0), the arrivals are counted (zk_await passes for two), and zk_leader,
#    which 1.0 could only call with its schema on the search_path, answers
#    with search_path = pg_catalog.
# 2. The catalog of "upd" after the update equals a fresh 1.1 install in
#    database "fresh": the extension's row, every member object
#    (pg_describe_object of pg_depend), every function's definition
#    (pg_get_functiondef: signature, volatility, strictness, security,
#    parallel safety, cost, rows, settings, body), owner and grants, the views'
#    definitions, owners, grants and columns, the type's attributes, and the
#    initial privileges (pg_init_privs) that pg_dump relies on.  The same
#    comparison between a fresh 1.0 and a fresh 1.1 finds the differences
#    (so it can fail: a zklock--1.0--1.1.sql that misses a change of
#    zklock--1.1.sql fails part 2).  The table zk_database_namespace (the
#    namespace '$database' stands for) is compared like the views (owner,
#    grants, columns); both hold this database's name.
#    Database "updgrant": a role granted produce with 1.0 (zk_grant), and
#    one granted only zk_enqueue(text, bytea, integer), get after the update
#    the array forms of zk_enqueue of the payload types they had; PUBLIC none.
#    A role whose name must be quoted ("Upd Lease") that could take leases
#    gets zk_lease_release; the monitor group's roles get zk_queue_stats
#    and zk_queue_metrics, and keep zk_queues (dropped and made again).
# 3. Database "sch": CREATE EXTENSION zklock SCHEMA zk puts every object in
#    zk; with search_path = public (no zk) qualified calls work: a lock, the
#    queue, the views, zk_status, zk_leader, zk_privilege_groups (names zk.),
#    zk_grant and zk_revoke (a role needs USAGE on zk, as on any schema, then
#    gets exactly its group); ALTER EXTENSION SET SCHEMA is refused
#    (relocatable = false).

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ZkLockTest;

my $zk = zk_start();
my $node = zk_node('update', $zk, conf => "zklock.elections = 'upd'\n");

# the default version is 1.1, and 1.0 is still installable
is( $node->safe_psql('postgres',
		"SELECT default_version FROM pg_available_extensions WHERE name = 'zklock'"),
	'1.1', 'the default version is 1.1');
is( $node->safe_psql('postgres',
		"SELECT string_agg(version, ',' ORDER BY version) FROM pg_available_extension_versions"
		  . " WHERE name = 'zklock'"),
	'1.0,1.1', 'versions 1.0 and 1.1 are available');
is( $node->safe_psql('postgres',
		"SELECT string_agg(source || '>' || target || ':' || coalesce(path, '-'), ' ' ORDER BY source, target)"
		  . " FROM pg_extension_update_paths('zklock')"),
	'1.0>1.1:1.0--1.1 1.1>1.0:-', 'one update path: 1.0 to 1.1');

# ---- 1. state made with 1.0 survives the update ----
$node->safe_psql('postgres', 'CREATE DATABASE upd');
$node->safe_psql('postgres', 'CREATE DATABASE fresh');
$node->safe_psql('postgres', 'CREATE DATABASE fresh10');
$node->safe_psql('postgres', 'CREATE DATABASE sch');

my ($rc, $out, $err) = $node->psql('fresh10',
	"CREATE SCHEMA zk; CREATE EXTENSION zklock VERSION '1.0' SCHEMA zk");
like($err, qr/must be installed in schema "public"/,
	'1.0 refuses a schema other than public (zklock--1.0.control)');
$node->safe_psql('fresh10', 'DROP SCHEMA zk');

$node->safe_psql('upd', "CREATE EXTENSION zklock VERSION '1.0'");
is($node->safe_psql('upd', "SELECT extversion FROM pg_extension WHERE extname = 'zklock'"),
	'1.0', 'upd: 1.0 installed');
like($node->safe_psql('upd', "SELECT prosrc FROM pg_proc WHERE proname = 'zk_leader'"),
	qr/FROM zk_election_candidates\(name\)/, 'upd: zk_leader is 1.0\'s');

my $A = new_session($node, name => 'A', dbname => 'upd');
my $B = new_session($node, name => 'B', dbname => 'upd');
my $token = $A->query_safe("SELECT zk_session_lock('upd-lock')");
like($token, qr/^\d+$/, "A holds upd-lock with 1.0 (token $token)");
$B->query_safe("BEGIN; SELECT zk_enqueue('upd-q', 'item-' || i) FROM generate_series(1, 5) i; COMMIT");
$B->query_safe("BEGIN; SELECT zk_arrive('upd-etl', 'p1'); SELECT zk_arrive('upd-etl', 'p2'); COMMIT");
is($B->query_safe("SELECT zk_try_lock('upd-lock')"), 'f', 'B cannot take upd-lock before the update');
$node->poll_query_until('upd', "SELECT zk_is_leader('upd')")
  or die 'the worker did not become leader of election upd';
my $r = $B->query("SET search_path = pg_catalog; SELECT this_server FROM public.zk_leader('upd')");
is($r->{sqlstate}, '42883', '1.0: zk_leader fails without public on the search_path');
$B->query_safe('RESET search_path');

$r = $B->query("ALTER EXTENSION zklock UPDATE TO '1.1'");
is($r->{sqlstate}, '00000', 'ALTER EXTENSION zklock UPDATE TO 1.1 while A holds its lock')
  or diag $r->{err};
is($node->safe_psql('upd', "SELECT extversion FROM pg_extension WHERE extname = 'zklock'"),
	'1.1', 'upd: 1.1 installed');

is($A->query_safe("SELECT zk_lock_token('upd-lock')"), $token, 'A still holds upd-lock, same token');
is($node->safe_psql('upd',
		"SELECT count(*) FROM zk_locks WHERE name = 'upd-lock' AND state = 'held' AND pid = $A->{pid}"),
	'1', 'zk_locks: A\'s entry is held');
is($B->query_safe("SELECT zk_try_lock('upd-lock')"), 'f', 'B still cannot take it (exclusive)');
is($B->query_safe("SELECT zk_try_session_lock_shared('upd-lock')"), 'f', 'nor share it');
is($node->safe_psql('postgres', "SELECT count(*) FROM zk_lock_holders('upd-lock') WHERE state = 'held'"),
	'1', 'ZooKeeper has one holder of upd-lock');
is($A->query_safe("SELECT zk_unlock('upd-lock')"), 't', 'A unlocks with 1.1');
is($B->query_safe("SELECT zk_try_session_lock('upd-lock')"), 't', 'then B takes it');
is($B->query_safe("SELECT zk_unlock('upd-lock')"), 't', 'and unlocks');

# the five items, each once, over two consumers
my @got;
for my $s ($A, $B, $A, $B)
{
	push @got, split /\n/, $s->query_safe(
		"BEGIN; SELECT body FROM zk_dequeue('upd-q', '5 seconds', 2); COMMIT");
	last if @got >= 5;
}
is(join(',', sort @got), 'item-1,item-2,item-3,item-4,item-5',
	'the five items enqueued with 1.0 are dequeued once each with 1.1');
is($B->query_safe("SELECT count(*) FROM zk_try_dequeue('upd-q', 10)"), '0', 'none is left');
is($B->query_safe("SELECT zk_queue_length('upd-q')"), '0', 'the queue is empty');
is($B->query_safe("SELECT string_agg(participant, ',' ORDER BY participant) FROM zk_arrivals('upd-etl')"),
	'p1,p2', 'the arrivals made with 1.0 are there');
is($B->query_safe("SELECT zk_await('upd-etl', 2, '5 seconds')"), 't', 'zk_await counts them');
$r = $B->query("SET search_path = pg_catalog; SELECT this_server FROM public.zk_leader('upd')");
is($r->{out}, 't', '1.1: zk_leader answers without public on the search_path') or diag $r->{err};
$A->quit;
$B->quit;

# ---- 2. the updated catalog equals a fresh 1.1 ----
$node->safe_psql('fresh', 'CREATE EXTENSION zklock');
$node->safe_psql('fresh10', "CREATE EXTENSION zklock VERSION '1.0'");
is($node->safe_psql('upd', 'SELECT namespace FROM zk_database_namespace')
	  . ' ' . $node->safe_psql('fresh', 'SELECT namespace FROM zk_database_namespace'),
	'upd fresh', 'the update and CREATE EXTENSION record the database\'s name');

# the objects of the extension
my $MEMBERS = q{
	SELECT d.classid, d.objid FROM pg_depend d
	  JOIN pg_extension e ON e.oid = d.refobjid
	 WHERE d.refclassid = 'pg_extension'::regclass AND e.extname = 'zklock' AND d.deptype = 'e'};
my $SORTED_ACL = q{(SELECT string_agg(a::text, ' ' ORDER BY a::text) FROM unnest(%s) a)};
my %CATALOG = (
	extension => q{
		SELECT extname, extversion, extrelocatable, extnamespace::regnamespace,
		       pg_get_userbyid(extowner), extconfig, extcondition
		  FROM pg_extension WHERE extname = 'zklock'},
	members => qq{
		SELECT pg_describe_object(m.classid, m.objid, 0) FROM ($MEMBERS) m},
	functions => qq{
		SELECT pg_get_functiondef(p.oid), pg_get_userbyid(p.proowner), }
	  . sprintf($SORTED_ACL, 'p.proacl') . qq{, p.prorettype::regtype, p.proretset, p.probin
		  FROM pg_proc p JOIN ($MEMBERS) m ON m.classid = 'pg_proc'::regclass AND m.objid = p.oid},
	views => qq{
		SELECT c.oid::regclass, c.relkind, pg_get_viewdef(c.oid), pg_get_userbyid(c.relowner), }
	  . sprintf($SORTED_ACL, 'c.relacl') . qq{
		  FROM pg_class c JOIN ($MEMBERS) m ON m.classid = 'pg_class'::regclass AND m.objid = c.oid},
	types => qq{
		SELECT t.oid::regtype, t.typtype, pg_get_userbyid(t.typowner), }
	  . sprintf($SORTED_ACL, 't.typacl') . qq{, a.attnum, a.attname,
		       format_type(a.atttypid, a.atttypmod)
		  FROM pg_type t JOIN ($MEMBERS) m ON m.classid = 'pg_type'::regclass AND m.objid = t.oid
		  LEFT JOIN pg_attribute a ON a.attrelid = t.typrelid AND a.attnum > 0},
	columns => qq{
		SELECT a.attrelid::regclass, a.attnum, a.attname, format_type(a.atttypid, a.atttypmod),
		       a.attnotnull, }
	  . sprintf($SORTED_ACL, 'a.attacl') . qq{
		  FROM pg_attribute a JOIN ($MEMBERS) m ON m.classid = 'pg_class'::regclass
		   AND m.objid = a.attrelid WHERE a.attnum > 0},
	init_privs => qq{
		SELECT pg_describe_object(i.classoid, i.objoid, i.objsubid), i.privtype, }
	  . sprintf($SORTED_ACL, 'i.initprivs') . qq{
		  FROM pg_init_privs i JOIN ($MEMBERS) m ON m.classid = i.classoid AND m.objid = i.objoid},
	comments => qq{
		SELECT pg_describe_object(ds.classoid, ds.objoid, ds.objsubid), ds.description
		  FROM pg_description ds JOIN ($MEMBERS) m ON m.classid = ds.classoid AND m.objid = ds.objoid},
);

# $db's catalog of the extension: { aspect => [sorted rows] }
sub catalog_of
{
	my ($db) = @_;
	my %c;
	for my $k (sort keys %CATALOG)
	{
		# one row per line: newlines inside a definition become \n
		my $rows = $node->safe_psql($db,
			"SELECT replace(r::text, E'\\n', '\\n') FROM ($CATALOG{$k}) r");
		$c{$k} = [ sort split /\n/, $rows ];
	}
	return \%c;
}

# the rows of each aspect only in $x or only in $y: '' when equal
sub catalog_diff
{
	my ($x, $y, $xname, $yname) = @_;
	my @d;
	for my $k (sort keys %$x)
	{
		my %inx = map { $_ => 1 } @{ $x->{$k} };
		my %iny = map { $_ => 1 } @{ $y->{$k} };
		push @d, map { "$k: only in $xname: $_" } grep { !$iny{$_} } @{ $x->{$k} };
		push @d, map { "$k: only in $yname: $_" } grep { !$inx{$_} } @{ $y->{$k} };
	}
	return join("\n", @d);
}

my $updated = catalog_of('upd');
my $fresh = catalog_of('fresh');
my $fresh10 = catalog_of('fresh10');
ok(@{ $fresh->{functions} } > 50, scalar(@{ $fresh->{functions} }) . ' functions compared');
ok(@{ $fresh->{views} } >= 6 && @{ $fresh->{types} } >= 5, 'views and the type compared');
ok(@{ $fresh->{init_privs} } > 50, scalar(@{ $fresh->{init_privs} }) . ' initial privileges compared');
like(join("\n", @{ $fresh->{functions} }), qr/GRANT|pg_monitor=X/,
	'grants are part of what is compared');
my $diff = catalog_diff($updated, $fresh, '1.0 updated', 'fresh 1.1');
is($diff, '', '1.0 updated to 1.1 has the catalog of a fresh 1.1')
  or diag $diff;
my $diff10 = catalog_diff($fresh10, $fresh, 'fresh 1.0', 'fresh 1.1');
isnt($diff10, '', 'the comparison tells a fresh 1.0 from a fresh 1.1 (so it can fail)');
note "fresh 1.0 against fresh 1.1:\n$diff10";
# what differs is only what zklock--1.0--1.1.sql changes (and the version)
# (1.1 adds the table zk_database_namespace and the views zk_quotas and
# zk_queue_metrics, with their columns, grants and membership; PostgreSQL 17
# and later also count their row types, and the table's array type, as
# members of the extension; zk_message gains attempts and the origin
# columns of dead letters, zk_queues its metrics' columns)
like($diff10, qr/^types: only in fresh 1\.1: .*zk_message.*\battempts\b/m,
	"1.1's zk_message has attempts");
like($diff10, qr/^types: only in fresh 1\.1: .*zk_message.*\borigin_attempts\b/m,
	"1.1's zk_message has origin_attempts");
my @aspects = sort { $a cmp $b } keys %{ { map { (/^(\w+):/)[0] => 1 }
	  grep { !/^types: .*\((zk_database_namespace|zk_quotas|zk_queue_metrics)(\[\])?,/ &&
			 !/^types: .*zk_message.*\b(attempts|origin|origin_msg_id|origin_attempts)\b/ &&
			 !/^types: .*zk_queues.*\b(delayed|dead_letter|max_attempts|oldest_ready_age|oldest_claim_age)\b/ }
	  split /\n/, $diff10 } };
is(join(',', @aspects), 'columns,extension,functions,init_privs,members,views',
	'1.0 and 1.1 differ in the version, functions, the table zk_database_namespace, the views zk_quotas and zk_queue_metrics and the new columns of zk_message and zk_queues only');

# ---- 2b. the update grants the array forms of zk_enqueue (issue 38) ----
# to the roles that may execute the scalar form of the same payload type,
# and to no one else (PUBLIC none); in a database of its own, whose grants
# a fresh install does not have
$node->safe_psql('postgres', 'CREATE DATABASE updgrant');
$node->safe_psql('updgrant', "CREATE EXTENSION zklock VERSION '1.0'");
$node->safe_psql('updgrant', q{
	CREATE ROLE upd_producer;
	CREATE ROLE upd_bytes;
	CREATE ROLE upd_none;
	CREATE ROLE "Upd Lease";
	CREATE ROLE upd_monitor;
	SELECT zk_grant('produce', 'upd_producer');
	SELECT zk_grant('monitor', 'upd_monitor');
	GRANT EXECUTE ON FUNCTION zk_enqueue(text, bytea, integer) TO upd_bytes;
	GRANT EXECUTE ON FUNCTION zk_try_lease(text, interval, text) TO "Upd Lease"});
$node->safe_psql('updgrant', "ALTER EXTENSION zklock UPDATE TO '1.1'");
is( $node->safe_psql('updgrant', q{
	SELECT string_agg(r || ':' || has_function_privilege(r, f, 'EXECUTE'), ' ' ORDER BY r, f)
	  FROM unnest(ARRAY['upd_producer', 'upd_bytes', 'upd_none', 'public']) r,
	       unnest(ARRAY['zk_enqueue(text,bytea[],integer)', 'zk_enqueue(text,text[],integer)']) f}),
	'public:false public:false upd_bytes:true upd_bytes:false upd_none:false upd_none:false'
	  . ' upd_producer:true upd_producer:true',
	'updgrant: the array forms go to who had the scalar form of their type, PUBLIC none');
is( $node->safe_psql('updgrant', q{
	SELECT has_function_privilege('Upd Lease', 'zk_lease_release(text,text)', 'EXECUTE')}),
	't', 'updgrant: zk_lease_release goes to a role whose name must be quoted that could take leases');
is( $node->safe_psql('updgrant', q{
	SELECT string_agg(r || ':' || has_function_privilege(r, 'zk_queue_stats()', 'EXECUTE'), ' ' ORDER BY r)
	  FROM unnest(ARRAY['upd_monitor', 'pg_monitor', 'upd_producer', 'public']) r}),
	'pg_monitor:true public:false upd_monitor:true upd_producer:false',
	'updgrant: zk_queue_stats goes to who could read zk_queues (pg_monitor, the monitor group), PUBLIC none');
is( $node->safe_psql('updgrant', q{
	SELECT string_agg(r || ':' || has_table_privilege(r, v, 'SELECT'), ' ' ORDER BY r, v)
	  FROM unnest(ARRAY['upd_monitor', 'pg_monitor', 'upd_producer']) r,
	       unnest(ARRAY['zk_queue_metrics', 'zk_queues']) v}),
	'pg_monitor:true pg_monitor:true upd_monitor:true upd_monitor:true upd_producer:false upd_producer:false',
	'updgrant: zk_queues keeps its readers (dropped and made again), and zk_queue_metrics goes to them');
is( $node->safe_psql('updgrant', q{
	SELECT string_agg(r || ':' || has_function_privilege(r, 'zk_queues_internal()', 'EXECUTE'), ' ' ORDER BY r)
	  FROM unnest(ARRAY['upd_monitor', 'pg_monitor', 'upd_producer', 'public']) r}),
	'pg_monitor:true public:false upd_monitor:true upd_producer:false',
	'updgrant: zk_queues_internal keeps its grants, PUBLIC none');

# ---- 3. 1.1 in schema zk ----
$node->safe_psql('sch', 'CREATE SCHEMA zk; CREATE EXTENSION zklock SCHEMA zk');
is($node->safe_psql('sch', qq{
	SELECT count(*) FILTER (WHERE n IS DISTINCT FROM 'zk'), count(*) FROM (
	  SELECT coalesce(
	    (SELECT pronamespace::regnamespace::text FROM pg_proc WHERE oid = m.objid AND m.classid = 'pg_proc'::regclass),
	    (SELECT relnamespace::regnamespace::text FROM pg_class WHERE oid = m.objid AND m.classid = 'pg_class'::regclass),
	    (SELECT typnamespace::regnamespace::text FROM pg_type WHERE oid = m.objid AND m.classid = 'pg_type'::regclass)) n
	  FROM ($MEMBERS) m) s}),
	'0|' . scalar(@{ $fresh->{members} }), 'sch: every object of the extension is in schema zk');
is($node->safe_psql('sch', "SELECT count(*) FROM pg_proc WHERE proname LIKE 'zk\\_%' AND pronamespace = 'public'::regnamespace"),
	'0', 'sch: none in public');

my $S = new_session($node, name => 'S', dbname => 'sch');
$S->query_safe('SET search_path = public');
is($S->query_safe("SELECT zk.zk_try_session_lock('sch-lock')"), 't', 'zk.zk_try_session_lock with search_path = public');
is($S->query_safe("SELECT count(*) FROM zk.zk_locks WHERE name = 'sch-lock' AND state = 'held'"),
	'1', 'zk.zk_locks shows it');
is($S->query_safe("SELECT state FROM zk.zk_status()"), 'connected', 'zk.zk_status()');
is($S->query_safe("SELECT count(*) >= 0 FROM zk.zk_entries"), 't', 'zk.zk_entries');
$S->query_safe("BEGIN; SELECT zk.zk_enqueue('sch-q', 'one'); COMMIT");
is($S->query_safe("BEGIN; SELECT body FROM zk.zk_dequeue('sch-q', '5 seconds'); COMMIT"),
	'one', 'zk.zk_enqueue and zk.zk_dequeue (type zk.zk_message)');
is($S->query_safe("SELECT count(*) FROM zk.zk_try_dequeue('sch-q')"), '0', 'the item was consumed once');
is($S->query_safe("SELECT this_server FROM zk.zk_leader('upd')"), 't', 'zk.zk_leader');
is($S->query_safe("SELECT count(*) FROM zk.zk_elections WHERE is_leader"), '1', 'zk.zk_elections');
like($S->query_safe("SELECT string_agg(object, ' ') FROM zk.zk_privilege_groups() WHERE group_name = 'produce'"),
	qr/^zk\.zk_enqueue\(text,bytea,integer\) zk\.zk_enqueue\(text,text,integer\) zk\.zk_enqueue\(text,bytea\[\],integer\) zk\.zk_enqueue\(text,text\[\],integer\) zk\.zk_enqueue\(text,bytea,interval,integer\) /,
	'zk_privilege_groups names the objects in zk');
is($S->query_safe("SELECT has_function_privilege('pg_monitor', 'zk.zk_status()', 'EXECUTE')"),
	't', 'the monitor group went to pg_monitor at CREATE EXTENSION');
is($S->query_safe("SELECT has_function_privilege('public', 'zk.zk_lock(text,interval,interval)', 'EXECUTE')"),
	'f', 'PUBLIC may not take locks');

$S->query_safe('CREATE ROLE sch_app');
$S->query_safe("SELECT zk.zk_grant('lock', 'sch_app')");
$r = $S->query("SET ROLE sch_app; SELECT zk.zk_try_lock('sch-app')");
is($r->{sqlstate}, '42501', 'without USAGE on schema zk the role cannot call it');
like($r->{err}, qr/permission denied for schema zk/, '... "permission denied for schema zk"');
$S->query('RESET ROLE');
$S->query_safe('GRANT USAGE ON SCHEMA zk TO sch_app');
is($S->query_safe("SET ROLE sch_app; SELECT zk.zk_try_lock('sch-app')"), 't',
	'with USAGE, zk_grant(\'lock\') lets it lock');
$r = $S->query("SELECT zk.zk_enqueue('sch-q', 'x')");
is($r->{sqlstate}, '42501', 'but not produce');
$S->query_safe('RESET ROLE');
$S->query_safe("SELECT zk.zk_revoke('lock', 'sch_app')");
$r = $S->query("SET ROLE sch_app; SELECT zk.zk_try_lock('sch-app2')");
is($r->{sqlstate}, '42501', 'zk.zk_revoke takes it back');
$S->query('RESET ROLE');
$r = $S->query('ALTER EXTENSION zklock SET SCHEMA public');
is($r->{sqlstate}, '0A000', 'the extension is not relocatable');
$S->quit;

$node->stop;
zk_stop($zk);
done_testing();
