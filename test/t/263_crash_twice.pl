# 263_crash_twice.pl - PostgreSQL crashes twice in a row, and the run
# between the crashes never settled what the first left.
#
# A run proves that the run before it was this data directory's own by
# $PGDATA/pgsql_tmp_zklock.run, a temporary file no copy carries; only a
# proven run's claims are released when its transaction did not commit
# (a copy's WAL may just end before its original's commit).  Run 2 here
# connects, names itself in that file, and crashes before it could
# register and settle run 1's claim (the proxy drops its creates); run 3
# must still know run 1 for its own and give the item back.  It once did
# not: it took run 1 over as an unproven ancestor and left the claim for
# good (the fault run lost two items so).

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ZkLockTest;
use ZkProxy;

my $zk = zk_start();
my $p = proxy_start($zk);
my $A = zk_node('twice', $p->{hosts}, session_timeout => '4s', connect_timeout => '3s');
my $Q = '/zklock/queues';
my $OWN = $A->data_dir . '/pgsql_tmp_zklock.run';

sub taken { my @l = zk_children($zk, "$Q/$_[0]/taken"); return scalar @l; }

sub own_file { return -e $OWN ? slurp_file($OWN) : ''; }

$A->safe_psql('postgres', "SELECT zk_enqueue('tq', 't1'), zk_enqueue('tq', 't2')");
my $h = new_session($A, name => 'holder');
$h->query_safe('BEGIN');
is($h->query_safe("SELECT body FROM zk_dequeue('tq', '5s')"), 't1', 'run 1 claims t1');
my @t = zk_children($zk, "$Q/tq/taken");
my ($run1) = (zk_get($zk, "$Q/tq/taken/$t[0]") // '') =~ /"run":"([0-9a-f]{16})"/;
ok(defined $run1, "the claim names run 1") or BAIL_OUT('no claim');
like(own_file(), qr/^$run1\n/, 'run 1 named itself in its own file');

# run 1 crashes holding the claim
$A->stop('immediate');
$h->quit;
is(taken('tq'), 1, "run 1's claim is left in ZooKeeper");

# run 2 connects but none of its creates land: it never registers, so
# it settles nothing; it names itself (and run 1 before it) all the same
my $drop = proxy_rule($p, 'drop-requests create');
$A->start;
ok(wait_until(sub { own_file() =~ /^([0-9a-f]{16})\n/ && $1 ne $run1 }, 60),
	'run 2 connected and named itself in its own file');
like(own_file(), qr/^earlier $run1\b/m, 'and run 1 before it');
sleep 2;
is(taken('tq'), 1, 'run 2 settled nothing');

# run 2 crashes too; run 3 can write
$A->stop('immediate');
proxy_cmd($p, 'reset');
proxy_cmd($p, 'cut-all');
$A->start;
ok(wait_until(sub { taken('tq') == 0 }, 60),
	"run 3 released run 1's claim: its transaction never committed")
  or diag slurp_file($A->logfile);
unlike(slurp_file($A->logfile), qr/left the queue claim .* alone/,
	'no claim was left alone');
my @got;
for (1 .. 3)
{
	my $b = $A->safe_psql('postgres', "SELECT body FROM zk_try_dequeue('tq')");
	push @got, $b if $b ne '';
}
is(join(',', sort @got), 't1,t2', 'both items come back, each once');
is(taken('tq'), 0, 'no claim left');

$A->stop('fast');
done_testing();
