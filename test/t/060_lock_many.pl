
# 060_lock_many.pl - many sessions at once (pgbench): shared and distinct names
# taken and released over and over leave nothing behind, and zk_lock gives
# mutual exclusion (no lost updates, no overlapping critical sections).

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use ZkLockTest;

my $zk = zk_start();
# a non-default zklock.root: everything must land below it
my $ROOT = '/tap060/zkroot';
my $node = zk_node('many', $zk,
	session_timeout => '6s',
	connect_timeout => '10s',
	conf => "zklock.root = '$ROOT'\n");

my $LOCKS = "$ROOT/locks";
my $dir = PostgreSQL::Test::Utils::tempdir('pgbench');

# run pgbench with the given scripts (name => text, or name@weight => text);
# returns (exit code, stdout, stderr)
sub pgbench
{
	my ($opts, %scripts) = @_;
	my @files;
	foreach my $name (sort keys %scripts)
	{
		my ($file, $weight) = split /@/, $name;
		my $path = "$dir/$file.sql";
		open(my $fh, '>', $path) or die "$path: $!";
		print $fh $scripts{$name};
		close $fh;
		push @files, '-f', $path . (defined $weight ? "\@$weight" : '');
	}
	my @cmd = (
		$node->installed_command('pgbench'), '-n',
		'-h', $node->host, '-p', $node->port,
		@$opts, @files, 'postgres');
	my ($out, $err) = ('', '');
	note "running: @cmd";
	my $ok = eval {
		IPC::Run::run(\@cmd, '<', \undef, '>', \$out, '2>', \$err,
			IPC::Run::timeout(240));
		1;
	};
	my $rc = $ok ? $? >> 8 : -1;
	$err .= "\n$@" unless $ok;
	note "pgbench rc=$rc\nstdout:\n$out\nstderr:\n$err";
	return ($rc, $out, $err);
}

my $probe = new_session($node, name => 'probe');
$probe->query_safe('BEGIN');
$probe->query_safe("SELECT zk_lock('probe')");
is(zk_count($zk, "$LOCKS/probe"), 1, "lock node under zklock.root ($LOCKS/probe)");
$probe->query_safe('COMMIT');
$probe->quit;

#
# 20 sessions, shared and distinct names, commit and rollback
#
my $grants0 = zk_status_value($node, 'grants');
my $clients = 20;
my $xacts = 25;
my ($rc, $out, $err) = pgbench(
	[ '-c', $clients, '-j', 2, '-t', $xacts ],
	'shared@3' => q{
BEGIN;
SELECT zk_lock('shared');
SELECT zk_lock('own_' || :client_id);
SELECT zk_lock('pair_' || (:client_id % 5));
SELECT zk_try_lock('try_' || (:client_id % 3));
COMMIT;
},
	'pairs@3' => q{
BEGIN;
SELECT zk_lock('pair_' || (:client_id % 5));
SELECT zk_lock('own_' || :client_id);
SELECT zk_lock('own_' || :client_id);
COMMIT;
},
	'rollback@2' => q{
BEGIN;
SELECT zk_lock('rb_' || (:client_id % 4));
SAVEPOINT a;
SELECT zk_lock('own_' || :client_id);
ROLLBACK TO SAVEPOINT a;
SELECT zk_try_lock('shared');
ROLLBACK;
},
	'auto@1' => q{
SELECT zk_lock('auto_' || (:client_id % 2), '30s');
});
is($rc, 0, 'pgbench with 20 clients finished without error') or diag $err;
my $total = $clients * $xacts;
like($out, qr{number of transactions actually processed: $total/$total},
	"all $total transactions processed");
unlike($out, qr{number of failed transactions: [1-9]}, 'no failed transactions');
unlike($err, qr{(ERROR|FATAL|aborted)}, 'no errors reported by pgbench');

ok(scalar(zk_wait_count($zk, $LOCKS, 0, 20)),
	'no nodes (and no lock containers) left in ZooKeeper after the run');
ok(wait_until(sub { zk_status_value($node, 'entries_used') eq '0' }, 10),
	'zk_status().entries_used back to 0');
my $grants1 = zk_status_value($node, 'grants');
my $delta = ($grants0 =~ /^\d+$/ && $grants1 =~ /^\d+$/) ? $grants1 - $grants0 : -1;
ok($delta >= $total, "grants counter advanced by at least $total ($delta)");
is(zk_status_value($node, 'state'), 'connected', 'still connected after the run');
my ($def_rc) = zkq($zk, 'exists', '/zklock');
is($def_rc, 1, "nothing under the default root /zklock (zklock.root is $ROOT)");

#
# mutual exclusion: read-modify-write of a counter in separate statements,
# and the critical sections' time intervals, under zk_lock('crit')
#
$node->safe_psql('postgres', q{
CREATE UNLOGGED TABLE counter (id int PRIMARY KEY, v bigint NOT NULL);
INSERT INTO counter VALUES (1, 0);
CREATE UNLOGGED TABLE intervals (id bigserial PRIMARY KEY, pid int, tok bigint,
    t0 numeric, t1 numeric);
});

my $crit_body = q{
SELECT v FROM counter WHERE id = 1 \gset
SELECT pg_sleep(0.01);
UPDATE counter SET v = :v + 1 WHERE id = 1;
INSERT INTO intervals (pid, tok, t0, t1)
  VALUES (pg_backend_pid(), :tok, :t0, extract(epoch FROM clock_timestamp()));
COMMIT;
};

# first without the lock: the checks below must be able to see overlaps
($rc, $out, $err) = pgbench(
	[ '-c', 5, '-j', 2, '-t', 5 ],
	'nolock' => q{
BEGIN;
SELECT 0 AS tok, extract(epoch FROM clock_timestamp()) AS t0 \gset
} . $crit_body);
is($rc, 0, 'control run without locks finished');

my $overlap_sql = q{
SELECT count(*) FROM intervals a JOIN intervals b ON a.id < b.id
 WHERE a.t0 < b.t1 AND b.t0 < a.t1};
my $control = $node->safe_psql('postgres', $overlap_sql);
my $control_v = $node->safe_psql('postgres', 'SELECT v FROM counter');
ok($control > 0 || $control_v < 25,
	"without zk_lock the checks do see races ($control overlaps, counter $control_v of 25)");

$node->safe_psql('postgres', 'UPDATE counter SET v = 0; TRUNCATE intervals');

my $n = 10;
my $iter = 20;
($rc, $out, $err) = pgbench(
	[ '-c', $n, '-j', 2, '-t', $iter ],
	'crit' => q{
BEGIN;
SELECT zk_lock('crit') AS tok, extract(epoch FROM clock_timestamp()) AS t0 \gset
} . $crit_body);
is($rc, 0, "$n clients x $iter critical sections finished") or diag $err;

my $expect = $n * $iter;
is($node->safe_psql('postgres', 'SELECT v FROM counter'), $expect,
	"counter is $expect: no lost updates");
is($node->safe_psql('postgres', 'SELECT count(*) FROM intervals'), $expect,
	'every critical section recorded');
my $overlaps = $node->safe_psql('postgres', $overlap_sql);
is($overlaps, 0, 'no two critical sections overlap in time');
diag $node->safe_psql('postgres',
	q{SELECT a.pid, a.t0, a.t1, b.pid, b.t0, b.t1 FROM intervals a JOIN intervals b
	  ON a.id < b.id WHERE a.t0 < b.t1 AND b.t0 < a.t1 LIMIT 10})
  if $overlaps;
is($node->safe_psql('postgres', q{
SELECT count(*) FROM (SELECT tok, lag(tok) OVER (ORDER BY t0) AS prev FROM intervals) x
 WHERE prev >= tok}), 0, 'fencing tokens strictly increase in grant order');
is($node->safe_psql('postgres', 'SELECT count(DISTINCT pid) FROM intervals'), $n,
	"all $n sessions got the lock");

ok(scalar(zk_wait_count($zk, $LOCKS, 0, 15)), 'no nodes left after the mutual exclusion run');
ok(wait_until(sub { zk_status_value($node, 'entries_used') eq '0' }, 10),
	'entries_used back to 0');

$node->stop;
done_testing();
