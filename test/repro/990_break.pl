
# 990_break.pl - hostile review of issue 35 items 1-4, 9 (breaker).
#
# A. max_kept_items is per queue: one role keeps many times it in ZooKeeper
#    by spreading items over many queues (no per-role bound on nodes kept).
# (B, semaphores and leases leaving a node per name: fixed, 537_quota_gaps.pl
#  C and 431_lease_cleanup.pl)
# C. '$database' recorded at CREATE EXTENSION: after the victim's database is
#    renamed, a tenant creates a database of the victim's recorded name; the
#    superuser's CREATE EXTENSION records it with no warning and the tenant
#    takes the victim's item.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ZkLockTest;

my $zk = zk_start();
my $A = zk_node('brk', $zk, namespace => undef);
my $su = $A->safe_psql('postgres', 'SELECT current_user');

sub run
{
	my ($db, $sql, $user) = @_;
	return sqlstate_psql($A, $db, $sql, $user // $su, timeout => 120);
}

$A->safe_psql('postgres', q{
CREATE ROLE prod LOGIN; CREATE ROLE sem LOGIN;
CREATE ROLE bob LOGIN CREATEDB; CREATE ROLE carol LOGIN CREATEDB;
SELECT zk_grant('produce', 'prod');
SELECT zk_grant('semaphore', 'sem'); SELECT zk_grant('lease', 'sem');
ALTER ROLE prod SET zklock.max_kept_items = 2;
});

#
# A. per-queue bound, not per role
#
my $r = run('postgres', q{
DO $$ BEGIN FOR i IN 1..40 LOOP
  PERFORM zk_enqueue('kq' || i, 'x'); COMMIT;
END LOOP; END $$;}, 'prod');
is($r->{sqlstate}, '00000', 'A: prod (max_kept_items 2) commits 40 items into 40 queues') or diag $r->{err};
my $items = 0;
$items += zk_count($zk, "/zklock/queues/postgres:kq$_/entries") for 1 .. 40;
my $qnodes = zk_count($zk, '/zklock/queues');
note "A: items kept: $items; znodes under /zklock/queues: $qnodes";
note 'A: zk_quotas: ' . $A->safe_psql('postgres', "SELECT row_to_json(q) FROM zk_quotas q WHERE role = 'prod'");
ok($items <= 2, "A: one role keeps at most max_kept_items=2 items (observed $items, $qnodes znodes)");

#
# C. namespace of a renamed database reused
#
$r = run('postgres', 'CREATE DATABASE etl', 'bob');
is($r->{sqlstate}, '00000', 'C: bob creates database etl') or diag $r->{err};
$A->safe_psql('etl', q{CREATE SCHEMA zk; CREATE EXTENSION zklock SCHEMA zk;
GRANT USAGE ON SCHEMA zk TO bob; SELECT zk.zk_grant('produce', 'bob'); SELECT zk.zk_grant('consume', 'bob');});
$r = run('etl', "SELECT zk.zk_path('queue', 'jobs'); SELECT zk.zk_enqueue('jobs', 'bob-secret')", 'bob');
like($r->{out}, qr{^/zklock/queues/etl:jobs}, 'C: bob\'s queue jobs is in etl') or diag $r->{err};
is(zk_count($zk, '/zklock/queues/etl:jobs/entries'), 1, 'C: ZooKeeper holds bob\'s item');
$r = run('postgres', 'ALTER DATABASE etl RENAME TO bobdb', 'bob');
is($r->{sqlstate}, '00000', 'C: bob renames his database to bobdb (his namespace stays etl)') or diag $r->{err};
$r = run('postgres', 'CREATE DATABASE etl', 'carol');
is($r->{sqlstate}, '00000', 'C: carol creates a database named etl') or diag $r->{err};
$r = run('etl', q{CREATE SCHEMA zk; CREATE EXTENSION zklock SCHEMA zk;
GRANT USAGE ON SCHEMA zk TO carol; SELECT zk.zk_grant('consume', 'carol');});
note "C: superuser's CREATE EXTENSION in carol's etl: $r->{sqlstate} $r->{err}";
my $warned = ($r->{sqlstate} ne '00000' || $r->{err} =~ /also that of/) ? 1 : 0;
$r = run('etl', "SELECT zk.zk_path('queue', 'jobs'); BEGIN; SELECT body FROM zk.zk_try_dequeue('jobs'); COMMIT", 'carol');
note "C: carol: $r->{out} $r->{err}";
ok($warned || $r->{out} !~ /bob-secret/,
	"C: carol's new database etl is refused/warned, or does not reach bob's namespace (warned=$warned, carol got: "
	  . join(' ', split /\n/, $r->{out}) . ')');

$A->stop;
zk_stop($zk);
done_testing();
