
# 512_trojan.pl - no trojan path from a database's owner to superuser
# (issue 35, item 4).  Roles: "owner" owns the tenant databases (no
# superuser), "carol" is a tenant; the superuser is the test's own user
# (its name is also the name of the schema "$user" stands for).
#
# The trojans of the issue, planted by the database's owner, each a
# function that runs "ALTER ROLE carol SUPERUSER" with the rights of the
# superuser who calls it by mistake:
#   T1  zk_grant(text, regrole, boolean) in a schema named after the
#       superuser, which "$user", public finds first;
#   T2  an overload zk_grant(text, text) in public (PostgreSQL 15 makes the
#       database's owner the owner of public), which matches two string
#       literals better than zklock's own (text, regrole, boolean) -- even
#       in a call qualified with public.
#
# 1. The issue's layout, the extension in the owner's public: CREATE
#    EXTENSION zklock refuses it (42501, hint: a schema of its own) and
#    creates nothing.  A 1.0 installed there (1.0 had no check) and updated
#    warns; T2 planted, an unqualified or public-qualified call runs the
#    trojan (carol becomes superuser: the trojan is live), and zklock's own
#    zk_grant, reached with its exact types, refuses (42501) and grants
#    nothing.
# 2. The documented layout: CREATE SCHEMA zk; CREATE EXTENSION zklock
#    SCHEMA zk, in a database the owner owns (a WARNING names public).  With
#    T1 and T2 planted, an unqualified call still runs a trojan, while the
#    documented call, SELECT zk.zk_grant('consume', 'carol') (with and
#    without SET search_path = pg_catalog, pg_temp), grants consume and
#    carol stays a plain role; its WARNING names the writable schemas on the
#    search_path ("$user"'s and public) and their owner.
# 3. The layout changes after CREATE EXTENSION: GRANT CREATE on zk to carol,
#    or to PUBLIC, makes zk_grant and zk_revoke refuse (42501, naming carol
#    or PUBLIC); revoked, they work again.  A database whose owner becomes a
#    role that is not superuser (ALTER DATABASE ... OWNER TO, public then
#    his) refuses zk_grant for the extension in public.
# 4. Catalog: every SQL or PL/pgSQL function of the extension runs with
#    search_path = pg_catalog, pg_temp; none is SECURITY DEFINER.
# 5. Docs: every call of zk_grant, zk_revoke, zk_set_database_namespace and
#    zk_queue_release_cluster in the SQL examples of README.md and doc/*.md
#    is qualified with the schema zk.

use strict;
use warnings FATAL => 'all';

use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use ZkLockTest;

my $zk = zk_start();
my $node = zk_node('trojan', $zk);
my $su = $node->safe_psql('postgres', 'SELECT current_user');

# Run $sql in $db as $user (the superuser by default); psql stops at the
# first error.  Returns { sqlstate, out, err }.
sub run
{
	my ($db, $sql, $user) = @_;
	return sqlstate_psql($node, $db, $sql, $user // $su);
}

sub carol_is_super
{
	return $node->safe_psql('postgres', "SELECT rolsuper FROM pg_roles WHERE rolname = 'carol'");
}

sub demote { $node->safe_psql('postgres', 'ALTER ROLE carol NOSUPERUSER'); }

# may carol dequeue (in $db, the extension in schema $schema)?
sub carol_consumes
{
	my ($db, $schema) = @_;
	return $node->safe_psql($db,
		"SELECT has_function_privilege('carol', '$schema.zk_try_dequeue(text,integer)', 'EXECUTE')");
}

$node->safe_psql('postgres', q{
	CREATE ROLE owner LOGIN CREATEDB;
	CREATE ROLE carol LOGIN;
	CREATE DATABASE t1 OWNER owner;
	CREATE DATABASE t2 OWNER owner;
	CREATE DATABASE t3;
});

my $T1 = qq{
	CREATE SCHEMA "$su";
	CREATE FUNCTION "$su".zk_grant(group_name text, grantee regrole, do_revoke boolean DEFAULT false)
	RETURNS void LANGUAGE plpgsql AS \$\$ BEGIN EXECUTE 'ALTER ROLE carol SUPERUSER'; END \$\$;
};
my $T2 = q{
	CREATE FUNCTION public.zk_grant(text, text)
	RETURNS void LANGUAGE plpgsql AS $$ BEGIN EXECUTE 'ALTER ROLE carol SUPERUSER'; END $$;
};

#
# 1. The issue's layout: the extension in public, which the owner owns
#
is($node->safe_psql('t1', 'SELECT nspowner::regrole FROM pg_namespace WHERE nspname = \'public\''),
	'pg_database_owner', 'public belongs to the database\'s owner (PostgreSQL 15)');
my $r = run('t1', 'CREATE EXTENSION zklock');
is($r->{sqlstate}, '42501', 'CREATE EXTENSION zklock into the owner\'s public is refused (42501)')
  or diag $r->{err};
like($r->{err}, qr/cannot be installed into schema public: owner may create objects in it/,
	'... saying who may create objects there');
like($r->{err}, qr/HINT:.*CREATE SCHEMA zk; CREATE EXTENSION zklock SCHEMA zk/,
	'... and hinting at a schema of its own');
is($node->safe_psql('t1', "SELECT count(*) FROM pg_extension WHERE extname = 'zklock'")
	  . $node->safe_psql('t1', "SELECT count(*) FROM pg_proc WHERE proname LIKE 'zk\\_%'"),
	'00', 'nothing was created');

$r = run('t1', "CREATE EXTENSION zklock VERSION '1.0'; ALTER EXTENSION zklock UPDATE TO '1.1'");
is($r->{sqlstate}, '00000', '1.0 (which had no check) installs there, and updates') or diag $r->{err};
like($r->{err}, qr/WARNING:.*zklock's schema public is writable by roles that are not superusers/,
	'the update warns that the schema is writable');
is(run('t1', $T2, 'owner')->{sqlstate}, '00000', 'the owner plants T2, public.zk_grant(text, text)');

is(run('t1', "SELECT zk_grant('consume', 'carol')")->{sqlstate}, '00000',
	'the superuser\'s unqualified zk_grant(\'consume\', \'carol\') runs ...');
is(carol_is_super(), 't', '... the trojan: carol is superuser (the attack of the issue is live)');
demote();
run('t1', "SELECT public.zk_grant('consume', 'carol')");
is(carol_is_super(), 't', 'so does public.zk_grant(...): in a writable schema a qualified call is no defence');
demote();

$r = run('t1', "SELECT public.zk_grant('consume'::text, 'carol'::regrole, false)");
is($r->{sqlstate}, '42501', "zklock's own zk_grant refuses to run in this layout (42501)") or diag $r->{err};
like($r->{err}, qr/zklock's schema public is writable by roles that are not superusers: owner/,
	'... naming the schema and the role');
like($r->{err}, qr/HINT:.*CREATE SCHEMA zk; CREATE EXTENSION zklock SCHEMA zk/, '... with the way out');
is(carol_is_super() . carol_consumes('t1', 'public'), 'ff', 'carol is neither superuser nor granted consume');
is(run('t1', "SELECT public.zk_revoke('consume'::text, 'carol'::regrole)")->{sqlstate}, '42501',
	'zk_revoke refuses too');

#
# 2. The documented layout: a schema of zklock's own, owned by the superuser
#
$r = run('t2', 'CREATE SCHEMA zk; CREATE EXTENSION zklock SCHEMA zk');
is($r->{sqlstate}, '00000', 'CREATE SCHEMA zk; CREATE EXTENSION zklock SCHEMA zk works in the owner\'s database')
  or diag $r->{err};
like($r->{err}, qr/WARNING:.*schemas on the search_path are writable by roles that are not superusers: public \(owner\)/,
	'... warning that public is the owner\'s');
is(run('t2', $T1, 'owner')->{sqlstate}, '00000', "the owner plants T1 in a schema named \"$su\"");
is(run('t2', 'CREATE FUNCTION zk.zk_grant(text, text) RETURNS void LANGUAGE sql AS $$ SELECT $$', 'owner')->{sqlstate},
	'42501', 'but cannot create anything in zk');

run('t2', "SELECT zk_grant('consume', 'carol')");
is(carol_is_super(), 't', 'T1 is live: an unqualified zk_grant(...) makes carol superuser');
demote();

$r = run('t2', "SELECT zk.zk_grant('consume', 'carol')");
is($r->{sqlstate}, '00000', "the documented call, SELECT zk.zk_grant('consume', 'carol'), runs zklock's") or diag $r->{err};
is(carol_is_super() . carol_consumes('t2', 'zk'), 'ft', 'carol is granted consume and is no superuser');
like($r->{err}, qr/WARNING:.*writable by roles that are not superusers: .*\Q$su\E \(owner\)/,
	"its WARNING names \"$su\" and its owner");
like($r->{err}, qr/WARNING:.*writable by roles that are not superusers: .*public \(owner\)/,
	'... and public');
like($r->{err}, qr/HINT:.*schema-qualified, after SET search_path = pg_catalog, pg_temp/,
	'... and says how to call');

is(run('t2', $T2, 'owner')->{sqlstate}, '00000', 'the owner plants T2 too');
run('t2', "SELECT zk_grant('consume', 'carol')");
is(carol_is_super(), 't', 'an unqualified call with both planted runs a trojan');
demote();
$r = run('t2', "SET search_path = pg_catalog, pg_temp; SELECT zk.zk_revoke('consume', 'carol'); "
	  . "SELECT zk.zk_grant('lock', 'carol')");
is($r->{sqlstate}, '00000', 'with SET search_path = pg_catalog, pg_temp: zk.zk_revoke and zk.zk_grant') or diag $r->{err};
is(carol_is_super() . carol_consumes('t2', 'zk')
	  . $node->safe_psql('t2', "SELECT has_function_privilege('carol', 'zk.zk_try_lock(text)', 'EXECUTE')"),
	'fft', 'carol lost consume, got lock, and is no superuser');

#
# 3. The layout changes after CREATE EXTENSION
#
$node->safe_psql('t2', 'GRANT CREATE ON SCHEMA zk TO carol');
$r = run('t2', "SELECT zk.zk_grant('consume', 'carol')");
is($r->{sqlstate}, '42501', 'GRANT CREATE ON SCHEMA zk TO carol: zk_grant refuses') or diag $r->{err};
like($r->{err}, qr/zklock's schema zk is writable by roles that are not superusers: carol/, '... naming carol');
is(run('t2', "SELECT zk.zk_revoke('lock', 'carol')")->{sqlstate}, '42501', 'zk_revoke too');
$node->safe_psql('t2', 'REVOKE CREATE ON SCHEMA zk FROM carol; GRANT CREATE ON SCHEMA zk TO PUBLIC');
$r = run('t2', "SELECT zk.zk_grant('consume', 'carol')");
like($r->{err}, qr/42501:.*writable by roles that are not superusers: PUBLIC/, 'CREATE to PUBLIC: refused, naming PUBLIC');
$node->safe_psql('t2', 'REVOKE CREATE ON SCHEMA zk FROM PUBLIC');
is(run('t2', "SELECT zk.zk_revoke('lock', 'carol')")->{sqlstate}, '00000', 'revoked: zk_revoke works again');
is(carol_consumes('t2', 'zk'), 'f', 'and nothing was granted while refused');

$r = run('t3', 'CREATE EXTENSION zklock');
is($r->{sqlstate}, '00000', 'a database the superuser owns: the extension goes into public') or diag $r->{err};
is(run('t3', "SELECT zk_grant('lock', 'carol')")->{sqlstate}, '00000', 'zk_grant works there');
$node->safe_psql('postgres', 'ALTER DATABASE t3 OWNER TO owner');
$r = run('t3', "SELECT public.zk_grant('consume'::text, 'carol'::regrole, false)");
is($r->{sqlstate}, '42501', 'once owner owns the database (and so public), zk_grant refuses') or diag $r->{err};
like($r->{err}, qr/writable by roles that are not superusers: owner/, '... naming the new owner');

#
# 4. Catalog: fixed search_path, no SECURITY DEFINER
#
is($node->safe_psql('t2', q{
	SELECT coalesce(string_agg(p.oid::regprocedure::text, ', ' ORDER BY 1), '')
	  FROM pg_depend d JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'zklock'
	  JOIN pg_proc p ON p.oid = d.objid
	  JOIN pg_language l ON l.oid = p.prolang
	 WHERE d.classid = 'pg_proc'::regclass AND d.deptype = 'e' AND l.lanname IN ('sql', 'plpgsql')
	   AND NOT coalesce(p.proconfig @> ARRAY['search_path=pg_catalog, pg_temp'], false)}),
	'', 'every SQL and PL/pgSQL function of the extension runs with search_path = pg_catalog, pg_temp');
my ($nsql, $nsecdef) = split /\|/, $node->safe_psql('t2', q{
	SELECT count(*) FILTER (WHERE l.lanname IN ('sql', 'plpgsql')), count(*) FILTER (WHERE p.prosecdef)
	  FROM pg_depend d JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'zklock'
	  JOIN pg_proc p ON p.oid = d.objid JOIN pg_language l ON l.oid = p.prolang
	 WHERE d.classid = 'pg_proc'::regclass AND d.deptype = 'e'});
cmp_ok($nsql, '>=', 5, "$nsql of them (zk_grant, zk_revoke, zk_privilege_groups, zk_leader, "
	  . 'zk_set_database_namespace, ...)');
is($nsecdef, '0', 'none is SECURITY DEFINER');

#
# 5. Docs: the superusers' calls are qualified
#
my @unqualified;
my $ncalls = 0;
for my $f ('README.md', map { s{^\Q$ZkLockTest::SRC\E/}{}r } sort glob("$ZkLockTest::SRC/doc/*.md"))
{
	open(my $fh, '<', "$ZkLockTest::SRC/$f") or die "$f: $!";
	my ($in, $n) = (0, 0);
	while (my $line = <$fh>)
	{
		$n++;
		if ($line =~ /^\s*```\s*(\S*)/)
		{
			$in = $in ? 0 : ($1 =~ /^sql/ ? 1 : 2);
			next;
		}
		next unless $in == 1;
		while ($line =~ /(\S*?)\b(zk_grant|zk_revoke|zk_set_database_namespace|zk_queue_release_cluster)\(/g)
		{
			$ncalls++;
			push @unqualified, "$f:$n: $2" unless $1 =~ /(^|\W)zk\.$/;
		}
	}
	close $fh;
}
ok($ncalls >= 6, "$ncalls superuser calls in the docs' SQL examples");
is(join(', ', @unqualified), '', 'each is qualified with the schema zk');

$node->stop;
zk_stop($zk);
done_testing();
