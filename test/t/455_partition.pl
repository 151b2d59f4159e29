
# 455_partition.pl - a ZooKeeper server cut off from its quorum but still
# reachable by its clients cannot make two leaders or two holders of a
# one-lease semaphore (issue 22, item 4).
#
# A three-server ensemble whose server 3 reaches the others' quorum and
# election ports (and they its) only through test/blackhole.py.  Cluster A
# talks to server 3 alone, cluster B to servers 1 and 2.  A leads the
# election 'cron' and holds the one lease of semaphore 'one' in an open
# transaction; B waits for the lease.  Then the proxies black-hole: server 3
# keeps answering A's reads and pings (syncLimit is 20 s here, longer than
# A's 4 s session), while the quorum expires A's session after 4 s and B
# leads and takes the lease.  Until issue 22 A's proof of life was an
# exists that server 3 answered alone, so A went on calling itself leader
# and its COMMIT of the lease succeeded: two leaders, two holders.  Now the
# proof of life is a sync, which server 3 must forward to the leader and
# cannot: A's zk_is_leader turns false 2/3 of a session timeout after its
# last answered sync, before the quorum expires the session, and its COMMIT
# fails.  Sampled every 100 ms: never both leaders.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time sleep);
use ZkLockTest;

my $pe = zk_partition_ensemble("$PostgreSQL::Test::Utils::tmp_check/ens_partition");
my @cp = @{ $pe->{cp} };
sub bh { return $pe->{bh}->(@_); }

my $A = zk_node('partA', "127.0.0.1:$cp[2]",
	session_timeout => '4s', connect_timeout => '3s',
	conf => "zklock.elections = 'cron'\nzklock.commit_timeout = '3s'\n");
ok(wait_until(sub { $A->safe_psql('postgres', "SELECT zk_is_leader('cron')") eq 't' }, 30),
	'A leads');
my $B = zk_node('partB', "127.0.0.1:$cp[0],127.0.0.1:$cp[1]",
	session_timeout => '4s', connect_timeout => '3s',
	conf => "zklock.elections = 'cron'\n");
ok(wait_until(sub { $B->safe_psql('postgres', "SELECT count(*) FROM zk_election_candidates('cron')") eq '2' }, 30),
	'B stands behind A');

my $ha = new_session($A, name => 'holderA');
$ha->query_safe("BEGIN; SELECT zk_semaphore('one', 1)");
my $hb = new_session($B, name => 'waiterB');
$hb->query_safe('BEGIN');
$hb->send("SELECT zk_semaphore('one', 1, '60s')");
my $sa = new_session($A, name => 'sampleA');
my $sb = new_session($B, name => 'sampleB');

like(bh('hole'), qr/^ok/, 'server 3 is cut off from its quorum');
my $t0 = time();
my ($both, $samples, $b_leads_at, $b_holds_at, $a_false_at) = (0, 0, undef, undef, undef);
my $a_commit;
while (time() - $t0 < 18)
{
	my $a = $sa->query_safe("SELECT zk_is_leader('cron')");
	my $b = $sb->query_safe("SELECT zk_is_leader('cron')");
	$samples++;
	$both++ if $a eq 't' && $b eq 't';
	$a_false_at //= time() - $t0 if $a ne 't';
	$b_leads_at //= time() - $t0 if $b eq 't';
	if (!defined $b_holds_at)
	{
		my $r = $hb->poll;
		if ($r)
		{
			die "B's wait for the lease failed: $r->{sqlstate} $r->{err}"
			  unless $r->{sqlstate} eq '00000';
			$b_holds_at = time() - $t0;
			# B holds the lease: A's COMMIT must not succeed now
			$a_commit = $ha->query('COMMIT');
		}
	}
	last if defined $b_leads_at && defined $b_holds_at && time() - $t0 > $b_leads_at + 3;
	sleep 0.1;
}
note sprintf('%d samples; A stopped leading at %s s, B leads at %s s, B holds at %s s',
	$samples, $a_false_at // 'never', $b_leads_at // 'never', $b_holds_at // 'never');
is($both, 0, 'never two leaders');
ok(defined $b_leads_at, 'B leads once the quorum expired A');
ok(defined $a_false_at && defined $b_leads_at && $a_false_at <= $b_leads_at,
	'A stopped leading before B began');
ok(defined $b_holds_at, 'B took the lease');
ok($a_commit && $a_commit->{sqlstate} ne '00000',
	'A could not commit its lease once B held it: ' . ($a_commit ? $a_commit->{sqlstate} : 'no answer'));
$hb->query_safe('COMMIT');

like(bh('heal'), qr/^ok/, 'server 3 is back');
ok(wait_until(sub {
	my $s = zk_status($A);
	$s && $s->{state} eq 'connected' }, 60), 'A is connected again');
is($A->safe_psql('postgres', "SELECT zk_is_leader('cron')"), 'f', 'A is not the leader');
is($B->safe_psql('postgres', "SELECT zk_is_leader('cron')"), 't', 'B is');

$_->quit for ($ha, $hb, $sa, $sb);
$A->stop('fast');
$B->stop('fast');
$pe->{stop}->();
done_testing();
