
# 516_namespace_rename.pl - the default namespace is no tenant's choice
# (issue 35, item 3).  zklock.namespace's default, '$database', stands for
# the database's name recorded when a superuser ran CREATE EXTENSION
# (table zk_database_namespace), not for its current name.
#
# Cluster A, default namespace.  bob's database bobdb is set to namespace
# 'etl' by a superuser (ALTER DATABASE ... SET); carol has CREATEDB and owns
# carold.  bob holds a session lock "job" and has committed an item in
# queue "jobs", both in 'etl'.
#
# 1. The attack: carol renames carold to etl.  Her sessions stay in
#    namespace carold: zk_path says carold, zk_try_lock('job') gets her own
#    lock (bob's is untouched), zk_queue_peek and zk_try_dequeue on "jobs"
#    find nothing; ZooKeeper still has bob's one holder and one item under
#    etl:.  Before: she landed in 'etl', peeked and took bob's item and saw
#    his lock.
# 2. The record is the superuser's: carol (the database's owner) can
#    neither read nor change zk_database_namespace (42501), nor call
#    zk_set_database_namespace (42501).
# 3. A copy (CREATE DATABASE ... TEMPLATE, by carol) has no record of its
#    own: every call needing the namespace fails with 55000 (hint: a
#    superuser records one), zk_path of an election still answers.  A
#    superuser's zk_set_database_namespace() records the copy's name (the
#    next session uses it); a name also configured for another database
#    gets a WARNING naming it; ALTER DATABASE ... SET zklock.namespace wins
#    over '$database' without any record.
# 4. pg_dump of carol's database restored by a superuser into a new
#    database: the restore's CREATE EXTENSION records the new database's
#    name.
# 5. A database at 1.0 (no table) keeps 1.0's '$database', its current
#    name (a rename moves it) until ALTER EXTENSION UPDATE records the name.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ZkLockTest;

my $zk = zk_start();
my $A = zk_node('nsren', $zk, namespace => undef);
my $su = $A->safe_psql('postgres', 'SELECT current_user');

# Run $sql in $db as $user (the superuser by default).  Returns
# { sqlstate, out, err }.
sub run
{
	my ($db, $sql, $user) = @_;
	return sqlstate_psql($A, $db, $sql, $user // $su);
}

# a tenant's database as doc/security.md says: zklock in a schema zk of the
# superuser's, on the database's search_path; $user gets lock and consume
sub tenant_db
{
	my ($db, $owner) = @_;
	$A->safe_psql('postgres', "CREATE DATABASE $db OWNER $owner");
	install_for_tenant($A, $db, $owner);
}

$A->safe_psql('postgres', 'CREATE ROLE bob LOGIN; CREATE ROLE carol LOGIN CREATEDB');
tenant_db('bobdb', 'bob');
tenant_db('carold', 'carol');
$A->safe_psql('postgres', "ALTER DATABASE bobdb SET zklock.namespace = 'etl'");

is(run('bobdb', "SELECT zk_path('lock', 'job')", 'bob')->{out}, '/zklock/locks/etl:job',
	'bobdb is in namespace etl (ALTER DATABASE ... SET)');
is(run('carold', "SELECT zk_path('lock', 'job')", 'carol')->{out}, '/zklock/locks/carold:job',
	'carold is in namespace carold (its name at CREATE EXTENSION)');
is($A->safe_psql('carold', 'SELECT datoid = (SELECT oid FROM pg_database WHERE datname = current_database()) '
	  . "AND namespace = 'carold' FROM zk.zk_database_namespace"), 't',
	'zk_database_namespace holds one row: this database and its name');

my $bob = new_session($A, name => 'bob', dbname => 'bobdb', user => 'bob');
like($bob->query_safe("SELECT zk_session_lock('job')"), qr/^\d+$/, 'bob holds lock job');
$bob->query_safe("BEGIN; SELECT zk_enqueue('jobs', 'bob-secret'); COMMIT");
is(zk_count($zk, '/zklock/queues/etl:jobs/entries'), 1, 'ZooKeeper: bob\'s item under etl:jobs');

#
# 1. carol renames her database to etl
#
my $r = run('postgres', 'ALTER DATABASE carold RENAME TO etl', 'carol');
is($r->{sqlstate}, '00000', 'carol (CREATEDB, owner) renames carold to etl') or diag $r->{err};
is(run('etl', "SELECT zk_path('lock', 'job') || ' ' || zk_path('queue', 'jobs')", 'carol')->{out},
	'/zklock/locks/carold:job /zklock/queues/carold:jobs', 'a rename does not move the namespace: still carold');
$r = run('etl', "SELECT count(*) FROM zk_queue_peek('jobs'); "
	  . "BEGIN; SELECT count(*) FROM zk_try_dequeue('jobs', 10); COMMIT; "
	  . "SELECT zk_try_session_lock('job')", 'carol');
is($r->{out}, "0\n0\nt", "carol peeks and dequeues nothing of bob's, and gets her own lock job") or diag $r->{err};
is(zk_count($zk, '/zklock/queues/etl:jobs/entries'), 1, 'ZooKeeper: bob\'s item is still there');
is(scalar(grep { /__lock__/ } zk_children($zk, '/zklock/locks/etl:job')), 1,
	'ZooKeeper: bob is the one holder of etl:job');
is($bob->query_safe("SELECT zk_lock_token('job') IS NOT NULL"), 't', 'bob still holds his lock');
is($bob->query_safe("BEGIN; SELECT body FROM zk_try_dequeue('jobs'); COMMIT"), 'bob-secret',
	'and dequeues his own item');

#
# 2. Only superusers write the record
#
$r = run('etl', "UPDATE zk.zk_database_namespace SET namespace = 'etl'", 'carol');
is($r->{sqlstate}, '42501', 'the database\'s owner cannot change zk_database_namespace (42501)');
$r = run('etl', "INSERT INTO zk.zk_database_namespace VALUES (1, 'etl')", 'carol');
is($r->{sqlstate}, '42501', 'nor insert into it');
$r = run('etl', "SELECT zk.zk_set_database_namespace('etl')", 'carol');
is($r->{sqlstate}, '42501', 'nor call zk_set_database_namespace (42501)');
is(run('etl', "SELECT zk_path('lock', 'job')", 'carol')->{out}, '/zklock/locks/carold:job',
	'carol is still in carold');

#
# 3. A copy has no record of its own
#
$r = run('postgres', 'CREATE DATABASE carolcopy TEMPLATE etl', 'carol');
is($r->{sqlstate}, '00000', 'carol copies her database') or diag $r->{err};
# (database settings are not copied: the copy's sessions get the search_path again)
$A->safe_psql('postgres', 'ALTER DATABASE carolcopy SET search_path = "$user", public, zk');
for my $call ("SELECT zk_path('lock', 'job')", "SELECT zk_try_lock('job')",
	"SELECT count(*) FROM zk_queue_peek('jobs')")
{
	$r = run('carolcopy', $call, 'carol');
	is($r->{sqlstate}, '55000', "the copy: $call fails with 55000") or diag $r->{err};
}
like($r->{err}, qr/zklock has no namespace recorded for database "carolcopy"/, '... saying so');
like($r->{err}, qr/HINT:.*zk_set_database_namespace.*ALTER DATABASE \.\.\. SET zklock\.namespace/,
	'... hinting at what a superuser does');
is(run('carolcopy', "SELECT zk_path('election', 'e')", 'carol')->{out}, '/zklock/elections/e',
	'an election\'s path needs no namespace and still answers');

$r = run('carolcopy', "SELECT zk.zk_set_database_namespace('etl')");
is($r->{out}, 'etl', 'a superuser may record a namespace shared on purpose ...');
like($r->{err}, qr/WARNING:.*zklock namespace 'etl' of database carolcopy is also that of: database bobdb, database etl/,
	'... with a WARNING naming the database set to it and the one named so');
$r = run('carolcopy', "SELECT zk.zk_set_database_namespace()");
is($r->{out}, 'carolcopy', "zk_set_database_namespace() records the copy's name") or diag $r->{err};
unlike($r->{err}, qr/WARNING/, 'no other database is in namespace carolcopy');
is(run('carolcopy', "SELECT zk_path('lock', 'job')", 'carol')->{out}, '/zklock/locks/carolcopy:job',
	'the next session is in namespace carolcopy');
is(run('carolcopy', "SELECT zk.zk_set_database_namespace('')")->{sqlstate}, '22023',
	'an empty namespace cannot be recorded (22023)');

$A->safe_psql('postgres', 'CREATE DATABASE carolcopy2 TEMPLATE etl OWNER carol');
$A->safe_psql('postgres', 'ALTER DATABASE carolcopy2 SET search_path = "$user", public, zk');
$A->safe_psql('postgres', "ALTER DATABASE carolcopy2 SET zklock.namespace = 'set-by-admin'");
is(run('carolcopy2', "SELECT zk_path('lock', 'job')", 'carol')->{out}, '/zklock/locks/set-by-admin:job',
	'ALTER DATABASE ... SET zklock.namespace wins, without any record');

#
# 4. pg_dump and restore
#
my $dump = $PostgreSQL::Test::Utils::tmp_check . '/etl.sql';
command_ok([ $A->installed_command('pg_dump'), '-d', $A->connstr('etl'), '-f', $dump ], 'pg_dump of carol\'s database');
$A->safe_psql('postgres', 'CREATE DATABASE restored');
command_ok([ $A->installed_command('psql'), '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', $A->connstr('restored'), '-f', $dump ],
	'restored by a superuser into database restored');
is($A->safe_psql('restored', "SET search_path = zk; SELECT zk_path('lock', 'job')"), '/zklock/locks/restored:job',
	'the restore recorded the new database\'s name');

#
# 5. A database still at 1.0 (no table) keeps 1.0's meaning, its current
#    name, until ALTER EXTENSION zklock UPDATE records it
#
$A->safe_psql('postgres', 'CREATE DATABASE old10');
$A->safe_psql('old10', "CREATE EXTENSION zklock VERSION '1.0'");
is($A->safe_psql('old10', "SELECT zk_path('lock', 'job')"), '/zklock/locks/old10:job', '1.0: its current name');
$A->safe_psql('postgres', 'ALTER DATABASE old10 RENAME TO old10b');
is($A->safe_psql('old10b', "SELECT zk_path('lock', 'job')"), '/zklock/locks/old10b:job',
	'1.0: a rename moves it, as 1.0 did');
$A->safe_psql('old10b', 'ALTER EXTENSION zklock UPDATE');
$A->safe_psql('postgres', 'ALTER DATABASE old10b RENAME TO old10c');
is($A->safe_psql('old10c', "SELECT zk_path('lock', 'job')"), '/zklock/locks/old10b:job',
	'updated to 1.1: the name at the update, whatever the rename after it');

$bob->quit;
$A->stop;
zk_stop($zk);
done_testing();
