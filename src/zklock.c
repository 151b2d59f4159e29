/*-------------------------------------------------------------------------
 *
 * zklock.c
 *	  The module's entry: the one file above every folder (src/README,
 *	  "Layers").  It makes the registry from recipelist.h -- every kind of
 *	  entry with its operations, name and wait event, every recipe's worker
 *	  and backend halves -- and hands it to the base at load; the base
 *	  (src/core) reaches the recipes only through it.
 *
 *-------------------------------------------------------------------------
 */
#include "zklock.h"
#include "recipe.h"

#include "fmgr.h"

PG_MODULE_MAGIC;

void		_PG_init(void);

/* every recipe's halves and every kind's operations, declared */
#define ZK_RECIPE(id) \
	extern const ZkRecipe zk_##id##_recipe; \
	extern const ZkRecipeBackend zk_##id##_backend;
#define ZK_KIND(kind, ops, label, wait, node, holder_data) extern const ZkKindOps ops;
#include "recipelist.h"
#undef ZK_RECIPE
#undef ZK_KIND

/* the kinds, by ZkKind */
#define ZK_RECIPE(id)
#define ZK_KIND(kind, ops, label, wait, node, holder_data) \
	[kind] = {&ops, label, wait, node, holder_data},
static const ZkKindInfo kinds[] = {
#include "recipelist.h"
};
#undef ZK_RECIPE
#undef ZK_KIND

StaticAssertDecl(lengthof(kinds) == ZKK_NUM, "every entry kind needs its operations");

/* the recipes' halves, in the list's order */
#define ZK_RECIPE(id) &zk_##id##_recipe,
#define ZK_KIND(kind, ops, label, wait, node, holder_data)
static const ZkRecipe *const recipes[] = {
#include "recipelist.h"
};
#undef ZK_RECIPE
#undef ZK_KIND

#define ZK_RECIPE(id) &zk_##id##_backend,
#define ZK_KIND(kind, ops, label, wait, node, holder_data)
static const ZkRecipeBackend *const backends[] = {
#include "recipelist.h"
};
#undef ZK_RECIPE
#undef ZK_KIND

StaticAssertDecl(lengthof(recipes) == lengthof(backends), "every recipe has two halves");

static const ZkRegistry registry = {
	.kinds = kinds,
	.recipes = recipes,
	.backends = backends,
	.nrecipes = lengthof(recipes),
};

/* Module load, in the postmaster (shared_preload_libraries): settings.c */
void
_PG_init(void)
{
	zk_module_init(&registry);
}
