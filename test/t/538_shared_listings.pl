
# 538_shared_listings.pl - listings of a directory every namespace shares
# (issue 35): <root>/queues and <root>/leases hold the names of every
# tenant, so zklock.max_children bounds what the caller may see (its own
# namespace's names), never the others', and zklock.max_answer_bytes the
# bytes of the listing.  (On main 1ece2ff one tenant's 40 queues and leases
# made another tenant's zk_queues and zk_leases fail with 54000: the
# reproduction 991_break2.pl, part E, removed from test/repro once fixed.)
#
# One cluster behind the test's proxy (test/zkproxy.py, which counts the
# requests the worker sends), namespaces by database ('$database'): role ten
# works in database postgres (namespace "postgres"), role other in database
# otherdb (namespace "otherdb"); zklock.max_children is 30.
#
# A. ten makes 40 queues, 40 leases and 40 semaphores, other 2 queues and 2
#    leases; ZooKeeper holds them (counted through kazoo).
# B. other's zk_queues and zk_leases answer its own 2 rows each, and
#    zk_semaphores, zk_locks and zk_elections answer too; the reads per
#    child go to its own names only: zk_queues counts 2 queues (one exists
#    of the directory, two per queue), zk_leases reads 2 lease holders.
# C. ten's own zk_queues and zk_leases fail with 54000 naming
#    zklock.max_children, with the hint, after one listing and without a
#    read per child.  Above the bound (zklock.max_children 50) they answer.
# D. 6,000 names of about 390 bytes in a third namespace under
#    <root>/leases (kazoo): the listing is 2.3 MB.  other's zk_leases with
#    zklock.max_answer_bytes at 2 MB fails with 54000 naming that setting,
#    without a read per child; with the default it answers its 2 rows.  The
#    worker keeps its session and another session's lock + COMMIT goes
#    through at once.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use ZkLockTest;
use ZkProxy;

my $zk = zk_start();
my $proxy = proxy_start($zk);
# (the root's kept totals off: their read every second would count as a
# read of the calls measured here)
my $A = zk_node('shared', $proxy->{hosts}, namespace => undef,
	# the counts below are the views' own: no background reads of the
	# worker's (the lease cleanup, the namespace census) in their windows
	conf => "zklock.max_kept_bytes = 0\nzklock.max_kept_nodes = 0\n"
	  . "zklock.lease_cleanup_interval = 0\nzklock.max_namespace_items = 0\n");
my $sid = zk_status_value($A, 'session_id');

$A->safe_psql('postgres', q{
CREATE ROLE ten LOGIN; CREATE ROLE other LOGIN;
SELECT zk_grant(g, 'ten') FROM unnest(ARRAY['lock','produce','consume','lease','semaphore','monitor']) g;
CREATE DATABASE otherdb;
});
$A->safe_psql('otherdb', q{CREATE SCHEMA zk; CREATE EXTENSION zklock SCHEMA zk;
GRANT USAGE ON SCHEMA zk TO other;
SELECT zk.zk_grant(g, 'other') FROM unnest(ARRAY['lock','produce','lease','monitor']) g;});

# Run $sql as $user in $db, in a session that has asked for its namespace
# once already (the registry of claims); returns the result with the
# requests of each kind the worker sent meanwhile (sent)
sub measured
{
	my ($db, $user, $sql) = @_;
	my $s = new_session($A, name => "m_$user", dbname => $db, user => $user);
	$s->query_safe("SET search_path = zk, public");
	$s->query_safe("SELECT count(*) FROM zk_lease_holder('warm-up')");
	my $before = proxy_stats($proxy)->{requests};
	my $r = $s->query($sql, 120);
	my $st = proxy_stats($proxy);
	$s->quit;
	$r->{sent} = {};
	foreach my $op (keys %{ $st->{requests} })
	{
		$r->{sent}{$op} = $st->{requests}{$op} - ($before->{$op} // 0);
	}
	$r->{sent}{$_} //= 0 foreach qw(getData exists getChildren getChildren2);
	$r->{lists} = $r->{sent}{getChildren} + $r->{sent}{getChildren2};
	note sprintf("%s as %s: %s %s (getData %d, getChildren %d, exists %d) %s",
		$sql, $user, $r->{sqlstate}, $r->{out} // '', $r->{sent}{getData}, $r->{lists},
		$r->{sent}{exists}, ($r->{err} // '') =~ /ERROR:\s*(.*)/ ? $1 : '');
	return $r;
}

# The children of $dir in ZooKeeper whose names are of namespace $ns
sub zk_names_of
{
	my ($dir, $ns) = @_;
	return scalar(grep { /^\Q$ns\E:/ } zk_children($zk, $dir));
}

# Another session's lock and COMMIT go through at once, and the worker
# kept its session
sub still_fine
{
	my ($what) = @_;
	my $t0 = time();
	my $r = one_shot($A, "BEGIN; SELECT zk_lock('still_fine') > 0; COMMIT;");
	my $secs = time() - $t0;
	ok($r->{sqlstate} eq '00000' && $r->{out} =~ /t/ && $secs < 5,
		sprintf("$what: another session's lock + COMMIT works at once (%.2fs)", $secs))
	  or diag explain $r;
	is(zk_status_value($A, 'session_id'), $sid, "$what: the worker kept its session");
}

#
# A. Two tenants' names in the same directories
#
# $sql as $user in $db, in a session of its own
sub run_as
{
	my ($db, $user, $sql) = @_;
	my $s = new_session($A, name => "as_$user", dbname => $db, user => $user);
	my $r = $s->query("SET search_path = zk, public; $sql", 120);
	$s->quit;
	return $r;
}

my $r = run_as('postgres', 'ten', q{
DO $$ BEGIN FOR i IN 1..40 LOOP
  PERFORM zk_try_lease('l' || i, '1 hour');
  PERFORM zk_try_session_semaphore('s' || i, 1); PERFORM zk_semaphore_release('s' || i);
END LOOP; END $$;
DO $$ BEGIN FOR i IN 1..40 LOOP PERFORM zk_enqueue('q' || i, 'x'); COMMIT; END LOOP; END $$;});
is($r->{sqlstate}, '00000', 'A: ten makes 40 queues, leases and semaphores') or diag $r->{err};
$r = run_as('otherdb', 'other', q{
SELECT zk_try_lease('mine1', '1 hour'), zk_try_lease('mine2', '1 hour');
BEGIN; SELECT zk_enqueue('mine1', 'a'), zk_enqueue('mine2', 'b'); COMMIT;});
is($r->{sqlstate}, '00000', 'A: other makes 2 queues and 2 leases') or diag $r->{err};
is(zk_names_of('/zklock/queues', 'postgres') . ' ' . zk_names_of('/zklock/queues', 'otherdb'), '40 2',
	"A: ZooKeeper holds ten's 40 queues and other's 2 in /zklock/queues");
is(zk_names_of('/zklock/leases', 'postgres') . ' ' . zk_names_of('/zklock/leases', 'otherdb'), '40 2',
	"A: ... and their 40 and 2 leases in /zklock/leases");

# the worker deletes each released pool 2 s after its last release (three
# exists and a delete each): wait for them, so that the counts below are
# the views' own
ok(wait_until(sub { scalar(grep { /^postgres:/ && !/-__lock__$/ } zk_children($zk, '/zklock/semaphores')) == 0 }, 30),
	"A: ten's 40 semaphore pools are gone once quiet");
$A->safe_psql('postgres', "ALTER SYSTEM SET zklock.max_children = 30; SELECT pg_reload_conf()");
ok(wait_until(sub { measured('postgres', 'ten', 'SELECT count(*) FROM zk_queues')->{sqlstate} eq '54000' }, 30, 0.2),
	'A: zklock.max_children 30 is in force');

#
# B. Another tenant's views answer with its own rows
#
$r = measured('otherdb', 'other', "SELECT string_agg(queue || '=' || items, ',' ORDER BY queue) FROM zk_queues");
is($r->{sqlstate}, '00000', "B: other's zk_queues answers (ten's 40 queues are not its own)");
is($r->{out}, 'mine1=1,mine2=1', 'B: ... with its own 2 queues');
# (per queue of its own, on a first read: the child counts of entries,
# taken and delayed, the policy's data and ACL, and for the ages a listing
# of its items and of its claims and an exists of the oldest item and of
# its claim -- doc/queues.md, "zk_queues")
is($r->{lists}, 1 + 2 * 2, 'B: ... after one listing of /zklock/queues, and two of each of its own queues');
is($r->{sent}{exists}, 1 + 2 * 5, 'B: ... counting its own queues only (one exists of the directory, five per queue)');
is($r->{sent}{getData}, 2, 'B: ... reading no item (one read per queue: its own node, the policy)');

$r = measured('otherdb', 'other', "SELECT string_agg(name, ',' ORDER BY name) FROM zk_leases");
is($r->{sqlstate}, '00000', "B: other's zk_leases answers (ten's 40 leases are not its own)");
is($r->{out}, 'mine1,mine2', 'B: ... with its own 2 leases');
is($r->{sent}{getData}, 2, "B: ... reading its own 2 lease holders only");
is($r->{lists}, 1, 'B: ... after one listing (of /zklock/leases)');

foreach my $v ('zk_semaphores', 'zk_locks', 'zk_elections')
{
	$r = measured('otherdb', 'other', "SELECT count(*) FROM $v");
	is($r->{sqlstate}, '00000', "B: other's $v answers");
}

#
# C. The tenant's own names past the bound: 54000, with the hint
#
# ten's own names past the bound (and, after each, what the listing cost)
sub over_max_children
{
	my ($kind) = @_;
	my $r = measured('postgres', 'ten', "SELECT count(*) FROM zk_$kind");
	is($r->{sqlstate}, '54000', "C: ten's zk_$kind of its 40 $kind: 54000");
	like($r->{err}, qr/This namespace has 40 $kind, more than zklock\.max_children \(30\)/,
		"C: ... counting its own $kind, naming zklock.max_children");
	like($r->{err}, qr/HINT:\s+Delete some of them, or have a superuser raise zklock\.max_children/,
		'C: ... with the hint');
	return $r;
}
$r = over_max_children('queues');
is($r->{lists} . '/' . $r->{sent}{exists}, '1/1', 'C: ... after one listing, counting no queue');
$r = over_max_children('leases');
is($r->{sent}{getData}, 0, 'C: ... reading no lease holder');

$A->safe_psql('postgres', "ALTER SYSTEM SET zklock.max_children = 50; SELECT pg_reload_conf()");
ok(wait_until(sub { measured('postgres', 'ten', 'SELECT count(*) FROM zk_queues')->{out} eq '40' }, 30, 0.2),
	"C: with zklock.max_children 50, ten's zk_queues answers its 40 queues");
$r = measured('postgres', 'ten', 'SELECT count(*) FROM zk_leases');
is($r->{out}, '40', "C: ... and zk_leases its 40 leases");
is($r->{sent}{getData}, 40, 'C: ... reading its own 40 lease holders');

#
# D. A listing larger than zklock.max_answer_bytes
#
{
	my ($rc, $out, $err) = zkq($zk, 'fill', '/zklock/leases', 6000, 'flood:' . ('x' x 380) . '%05d', 0, 1000);
	chomp $out;
	is($out, '6042', 'D: ZooKeeper holds 6,000 long names of namespace "flood" besides the 42 leases')
	  or diag "rc $rc: $err";
}
$A->safe_psql('postgres', "ALTER ROLE other SET zklock.max_answer_bytes = '2MB'");
$r = measured('otherdb', 'other', 'SELECT count(*) FROM zk_leases');
is($r->{sqlstate}, '54000', "D: other's zk_leases over a listing of 2.3 MB with zklock.max_answer_bytes 2 MB: 54000");
like($r->{err}, qr/Listing the leases read 6042 names of every namespace, \d+ kB, more than zklock\.max_answer_bytes \(2048 kB\)/,
	'D: ... naming the listing\'s size and zklock.max_answer_bytes');
like($r->{err}, qr/HINT:\s+Every namespace's names are in that listing: have a superuser raise zklock\.max_answer_bytes/,
	'D: ... with the hint');
is($r->{sent}{getData}, 0, 'D: ... reading no lease holder');
still_fine('D');
$A->safe_psql('postgres', "ALTER ROLE other RESET zklock.max_answer_bytes");
$r = measured('otherdb', 'other', "SELECT string_agg(name, ',' ORDER BY name) FROM zk_leases");
is($r->{out}, 'mine1,mine2', 'D: with the default zklock.max_answer_bytes it answers its own 2 leases');
is($r->{sent}{getData}, 2, "D: ... reading its own 2 lease holders only");
still_fine('D');

$A->stop;
zk_stop($zk);
done_testing();
