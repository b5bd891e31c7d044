/**
 * Every default is declared once, in the config schema; the constants other modules use
 * when given no value are read from it (CONFIG_DEFAULTS), not literals of their own.
 */
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import {
  DEFAULT_BREAK_GLASS_GROUPS,
  DEFAULT_BUILTIN_MIGRATOR_USERS,
  DEFAULT_MANAGED_SELECTOR,
  DEFAULT_MIGRATING_ANNOTATION,
  DEFAULT_MIGRATOR_USERS,
} from '../../src/config/annotations.js'
import { loadConfig } from '../../src/config/load.js'
import { ConfigError } from '../../src/errors.js'
import { CONFIG_DEFAULTS, ConfigSchema } from '../../src/config/schema.js'
import { DEFAULT_ADMISSION_POLICY } from '../../src/webhook/admission.js'
import { DEFAULT_BODY_LIMIT_BYTES, SERVER_TIMEOUTS, serverTimeouts } from '../../src/webhook/server.js'

t.test('CONFIG_DEFAULTS is the schema parsed from nothing, frozen all the way down', async (t) => {
  t.strictSame(CONFIG_DEFAULTS, ConfigSchema.parse({}))
  t.strictSame(CONFIG_DEFAULTS, loadConfig(), 'and what loadConfig gives without sources')
  t.ok(
    Object.isFrozen(CONFIG_DEFAULTS) &&
      Object.isFrozen(CONFIG_DEFAULTS.webhook.timeouts) &&
      Object.isFrozen(CONFIG_DEFAULTS.identities.migratorUsers),
    'frozen',
  )
  const parsed = ConfigSchema.parse({})
  parsed.identities.migratorUsers.push('someone')
  parsed.webhook.timeouts.requestSeconds = 1
  t.strictSame(
    ConfigSchema.parse({}).identities.migratorUsers,
    ['system:serviceaccount:crd-migrator:crd-migrator'],
    'every parse gets its own copies',
  )
  t.equal(CONFIG_DEFAULTS.webhook.timeouts.requestSeconds, 10)
})

t.test("the constants of other modules are the schema's defaults", async (t) => {
  t.equal(DEFAULT_MIGRATING_ANNOTATION, CONFIG_DEFAULTS.annotations.migrating)
  t.equal(DEFAULT_MIGRATING_ANNOTATION, 'ksvm.sigs.k8s.io/migrating')
  t.equal(DEFAULT_MANAGED_SELECTOR, CONFIG_DEFAULTS.migrator.selector.labelSelector)
  t.equal(DEFAULT_MANAGED_SELECTOR, 'crd-migrator.io/managed=true')
  t.strictSame(DEFAULT_MIGRATOR_USERS, ['system:serviceaccount:crd-migrator:crd-migrator'])
  t.strictSame(DEFAULT_BREAK_GLASS_GROUPS, ['system:masters'])
  t.strictSame(
    DEFAULT_BUILTIN_MIGRATOR_USERS,
    ['system:kube-controller-manager', 'system:serviceaccount:kube-system:storage-version-migrator-controller'],
    "kube-controller-manager's own user, and its storage version migrator's ServiceAccount (--use-service-account-credentials)",
  )
  t.equal(CONFIG_DEFAULTS.migrator.strictStateKeyFile, false, 'a loose state key file is warned about, not refused')
  t.strictSame(
    DEFAULT_ADMISSION_POLICY,
    {
      migratingAnnotation: CONFIG_DEFAULTS.annotations.migrating,
      migratingValue: 'true',
      migratorUsers: CONFIG_DEFAULTS.identities.migratorUsers,
      migratorGroups: CONFIG_DEFAULTS.identities.migratorGroups,
      breakGlassGroups: CONFIG_DEFAULTS.identities.breakGlassGroups,
      builtinMigratorUsers: CONFIG_DEFAULTS.identities.builtinMigratorUsers,
    },
    'the admission policy',
  )
  t.equal(DEFAULT_BODY_LIMIT_BYTES, CONFIG_DEFAULTS.webhook.bodyLimitBytes)
  t.equal(DEFAULT_BODY_LIMIT_BYTES, 3 * 1024 * 1024, '3 MiB')
  t.strictSame(
    SERVER_TIMEOUTS,
    {
      requestTimeoutMs: 10_000,
      headersTimeoutMs: 5_000,
      connectionTimeoutMs: 15_000,
      keepAliveTimeoutMs: 95_000,
      connectionsCheckingIntervalMs: 2_000,
      tlsHandshakeTimeoutMs: 5_000,
      firstReviewMs: 5_000,
    },
    'the webhook timeouts, the documented ones, in milliseconds',
  )
  t.strictSame(SERVER_TIMEOUTS, serverTimeouts(CONFIG_DEFAULTS.webhook.timeouts))
})

t.test('webhook.timeouts: file-only, in seconds, validated', async (t) => {
  const dir = t.testdir({})
  const file = join(dir, 'config.yaml')
  writeFileSync(file, 'webhook:\n  timeouts:\n    requestSeconds: 20\n    keepAliveSeconds: 0.5\n')
  const c = loadConfig({ file })
  t.match(c.webhook.timeouts, { requestSeconds: 20, keepAliveSeconds: 0.5, headersSeconds: 5 }, 'unset ones keep their defaults')
  t.match(serverTimeouts(c.webhook.timeouts), { requestTimeoutMs: 20_000, keepAliveTimeoutMs: 500 })

  writeFileSync(file, 'webhook:\n  timeouts:\n    headersSeconds: 11\n')
  t.throws(() => loadConfig({ file }), ConfigError)
  t.throws(() => loadConfig({ file }), /webhook\.timeouts\.headersSeconds: headersSeconds must not be more than requestSeconds/)
  writeFileSync(file, 'webhook:\n  timeouts:\n    requestSeconds: 0\n')
  t.throws(() => loadConfig({ file }), /webhook\.timeouts\.requestSeconds/, 'no zero: that would turn the protection off')
  writeFileSync(file, 'webhook:\n  timeouts:\n    idleSeconds: 3\n')
  t.throws(() => loadConfig({ file }), /unrecognized|idleSeconds/i, 'unknown keys refused')
})
