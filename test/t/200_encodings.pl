
# 200_encodings.pl - lock names are text, not bytes of a database encoding
# (issue 6, weakness 16).  One cluster, three databases: UTF8, LATIN1 and
# SQL_ASCII.  The same non-ASCII name must be the same lock in all of them,
# under the path made of its UTF-8 bytes percent-encoded
# (/zklock/locks/caf%C3%A9-%C3%A9); zk_locks must show every name correctly
# in every database; a name whose UTF-8 form exceeds 255 bytes is refused
# (22023) even where its database encoding makes it shorter, and then
# nothing is created.
#
# The clients talk UTF-8 (PGCLIENTENCODING), so the same bytes of this file
# reach each database as the same characters.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ZkLockTest;

$ENV{PGCLIENTENCODING} = 'UTF8';

my $zk = zk_start();
my $node = zk_node('encodings', $zk,
	session_timeout => '10s',
	connect_timeout => '5s');

my $LOCKS = '/zklock/locks';

# names as UTF-8 bytes (this file stays ASCII)
my $CAFE = "caf\xc3\xa9-\xc3\xa9";			# café-é
my $CAFE_PATH = 'caf%C3%A9-%C3%A9';
my $CAFE_LATIN1_PATH = 'caf%E9-%E9';		# what LATIN1 bytes would give
my $NAIVE = "na\xc3\xafve-\xc3\xaf";		# naïve-ï
my $NAIVE_PATH = 'na%C3%AFve-%C3%AF';
my $NAIVE_LATIN1_PATH = 'na%EFve-%EF';

foreach my $db ([ 'u8', 'UTF8' ], [ 'l1', 'LATIN1' ], [ 'sa', 'SQL_ASCII' ])
{
	$node->safe_psql('postgres',
		"CREATE DATABASE $db->[0] ENCODING '$db->[1]' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0");
	$node->safe_psql($db->[0], 'CREATE EXTENSION zklock');
	is($node->safe_psql($db->[0], 'SHOW server_encoding'), $db->[1], "database $db->[0] is $db->[1]");
}

my $u8 = new_session($node, name => 'utf8_holder', dbname => 'u8');
my $l1 = new_session($node, name => 'latin1', dbname => 'l1');
my $sa = new_session($node, name => 'sql_ascii', dbname => 'sa');
my $u8q = new_session($node, name => 'utf8_observer', dbname => 'u8');
my $l1q = new_session($node, name => 'latin1_observer', dbname => 'l1');

# the client really sends and receives the name as UTF-8 in every database
is($l1q->query_safe("SELECT length('$CAFE'), octet_length('$CAFE')"), '6|6',
	'LATIN1 database: the name is 6 characters, 6 bytes in the database encoding');
is($u8q->query_safe("SELECT length('$CAFE'), octet_length('$CAFE')"), '6|8',
	'UTF8 database: the name is 6 characters, 8 bytes');
is($l1q->query_safe("SELECT '$CAFE'"), $CAFE, 'LATIN1 database echoes the name unchanged');

#
# a UTF8 session holds café-é
#
$u8->query_safe('BEGIN');
my $tok = $u8->query_safe("SELECT zk_lock('$CAFE')");
like($tok, qr/^\d+$/, "UTF8 session holds '$CAFE' (token $tok)");
my @top = zk_children($zk, $LOCKS);
is_deeply(\@top, [$CAFE_PATH], "ZooKeeper path is $LOCKS/$CAFE_PATH") or diag "children: @top";
is(zk_count($zk, "$LOCKS/$CAFE_PATH"), 1, 'one contender node under it');

# the LATIN1 database: the same name is the same lock
$l1->query_safe('BEGIN');
my $r = $l1->query("SELECT zk_try_lock('$CAFE')", 30);
is($r->{sqlstate}, '00000', 'zk_try_lock from the LATIN1 database runs') or diag $r->{err};
is($r->{out}, 'f', 'LATIN1 database: zk_try_lock of the same name is refused while the UTF8 session holds it');
@top = zk_children($zk, $LOCKS);
is_deeply(\@top, [$CAFE_PATH], "no other lock path was created (not $CAFE_LATIN1_PATH)")
  or diag "children: @top";
is(zk_count($zk, "$LOCKS/$CAFE_PATH"), 1, 'still one contender node');
$r = $l1->query("SELECT zk_lock('$CAFE', '200ms')", 30);
is($r->{sqlstate}, '55P03', 'LATIN1 database: zk_lock of the same name waits for the UTF8 holder and times out')
  or diag $r->{err};
$l1->query('ROLLBACK');

# zk_lock_holders from the LATIN1 database sees the UTF8 holder
$r = $l1q->query("SELECT count(*), max(pid) FROM zk_lock_holders('$CAFE')", 30);
is($r->{out}, "1|$u8->{pid}", 'LATIN1 database: zk_lock_holders of the name shows the UTF8 holder')
  or diag $r->{err};

# SQL_ASCII passes the client's bytes through: the same lock
$r = $sa->query("SELECT zk_try_lock('$CAFE')", 30);
is($r->{out}, 'f', 'SQL_ASCII database: zk_try_lock of the same name is refused') or diag $r->{err};

#
# a LATIN1 session holds naïve-ï
#
$l1->query_safe('BEGIN');
$tok = $l1->query_safe("SELECT zk_lock('$NAIVE')");
like($tok, qr/^\d+$/, "LATIN1 session holds '$NAIVE' (token $tok)");
ok(zk_exists($zk, "$LOCKS/$NAIVE_PATH"), "ZooKeeper path is $LOCKS/$NAIVE_PATH");
ok(!zk_exists($zk, "$LOCKS/$NAIVE_LATIN1_PATH"), "not $LOCKS/$NAIVE_LATIN1_PATH");
$r = $u8q->query("SELECT zk_try_lock('$NAIVE')", 30);
is($r->{out}, 'f', 'UTF8 database: zk_try_lock of the name held from LATIN1 is refused') or diag $r->{err};
$r = $sa->query("SELECT zk_try_lock('$NAIVE')", 30);
is($r->{out}, 'f', 'SQL_ASCII database: refused too') or diag $r->{err};

#
# zk_locks reads correctly in every database
#
foreach my $obs ([ $u8q, 'UTF8' ], [ $l1q, 'LATIN1' ])
{
	my ($s, $enc) = @$obs;
	is($s->query_safe("SELECT name FROM zk_locks WHERE pid = $u8->{pid}"), $CAFE,
		"$enc database: zk_locks shows the UTF8 session's lock as '$CAFE'");
	is($s->query_safe("SELECT name FROM zk_locks WHERE pid = $l1->{pid}"), $NAIVE,
		"$enc database: zk_locks shows the LATIN1 session's lock as '$NAIVE'");
	is($s->query_safe("SELECT count(*) FROM zk_locks WHERE name IN ('$CAFE', '$NAIVE')"), '2',
		"$enc database: both names compare equal to literals of this database");
	is($s->query_safe("SELECT node FROM zk_locks WHERE pid = $u8->{pid}") =~ m{^\Q$LOCKS/$CAFE_PATH\E/} ? 1 : 0, 1,
		"$enc database: zk_locks.node of the UTF8 session's lock is under $CAFE_PATH");
}

$u8->query_safe('COMMIT');
$l1->query_safe('COMMIT');
ok(scalar(zk_wait_count($zk, $LOCKS, 0, 10)), 'nothing left in ZooKeeper');

#
# too long in UTF-8, short enough in LATIN1: refused, nothing created
#
my $E200 = "\xc3\xa9" x 200;				# 200 characters, 400 bytes in UTF-8
is($l1q->query_safe("SELECT octet_length('$E200')"), '200', 'LATIN1 database: 200 x e-acute is 200 bytes there');
my $before = zk_status_value($node, 'requests');
foreach my $call ("zk_lock('$E200')", "zk_try_lock('$E200')", "zk_session_lock('$E200', '1s')",
	"zk_lock_shared('$E200')")
{
	(my $what = $call) =~ s/\Q$E200\E/<200 x e-acute>/;
	$l1->query_safe('BEGIN');
	$r = $l1->query("SELECT $call", 30);
	is($r->{sqlstate}, '22023', "LATIN1 database: $what refused with 22023 (400 bytes in UTF-8)")
	  or diag "got $r->{sqlstate}: $r->{err}";
	my @left = zk_children($zk, $LOCKS);
	is_deeply(\@left, [], "LATIN1 database: $what created nothing in ZooKeeper") or diag "children: @left";
	$l1->query('ROLLBACK');
	$l1->query("SELECT zk_unlock_all()");
}
$r = $l1q->query("SELECT count(*) FROM zk_lock_holders('$E200')", 30);
is($r->{sqlstate}, '22023', 'LATIN1 database: zk_lock_holders of that name refused with 22023') or diag $r->{err};
is(zk_status_value($node, 'requests'), $before, 'no request reached the worker');
# and in the UTF8 database, where it always was too long
$r = $u8q->query("SELECT zk_try_lock('$E200')", 30);
is($r->{sqlstate}, '22023', 'UTF8 database: the same name refused with 22023');
# the longest name that fits: 127 x e-acute + 1 byte = 255 bytes in UTF-8
my $E127 = ("\xc3\xa9" x 127) . 'x';
$r = $l1q->query("SELECT zk_try_lock('$E127')", 30);
is($r->{out}, 't', 'LATIN1 database: a name of exactly 255 bytes in UTF-8 is accepted') or diag $r->{err};

ok(wait_until(sub { zk_status_value($node, 'entries_used') eq '0' }, 10), 'entries_used back to 0');
ok(scalar(zk_wait_count($zk, $LOCKS, 0, 10)), 'nothing left in ZooKeeper');

$_->quit foreach ($u8, $l1, $sa, $u8q, $l1q);
$node->stop;
done_testing();
