import { execFileSync } from 'node:child_process'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import t, { type Test } from 'tap'
import { loadConfig } from '../../src/config/load.js'
import { ConfigError } from '../../src/errors.js'
import { ConfigSchema } from '../../src/config/schema.js'
import { parseSettingValue, SETTINGS } from '../../src/config/settings.js'
import { settingsFor } from '../../src/migrator/crd-settings.js'

/** Writes a config file into a fresh test directory and returns its path. */
function configFile(t: Test, text: string, name = 'config.yaml'): string {
  const dir = t.testdir({ [name]: '' })
  const path = join(dir, name)
  writeFileSync(path, text)
  return path
}

function configError(fn: () => unknown): ConfigError | undefined {
  try {
    fn()
  } catch (err) {
    if (err instanceof ConfigError) return err
    throw err
  }
  return undefined
}

function expectError(t: Test, fn: () => unknown, includes: string[], message: string) {
  const err = configError(fn)
  t.ok(err, `${message}: throws a ConfigError`)
  t.equal(err?.name, 'ConfigError', `${message}: name`)
  for (const part of includes) t.ok(err?.message.includes(part), `${message}: mentions ${JSON.stringify(part)}`, { error: err?.message })
}

t.test('defaults', async (t) => {
  const c = loadConfig()
  t.equal(c.webhook.port, 9443, 'webhook.port')
  t.equal(c.webhook.bodyLimitBytes, 3 * 1024 * 1024, 'webhook.bodyLimitBytes is 3 MiB')
  t.equal(c.webhook.enabled, true, 'webhook.enabled')
  t.equal(c.webhook.certFile, '/tls/tls.crt')
  t.equal(c.webhook.keyFile, '/tls/tls.key')
  t.equal(c.metrics.port, 8080, 'metrics.port')
  t.equal(c.migrator.concurrency, 64, 'migrator.concurrency')
  t.equal(c.migrator.qps, 0, 'migrator.qps')
  t.equal(c.migrator.pageSize, 500, 'migrator.pageSize')
  t.equal(c.migrator.maxAttempts, 8, 'migrator.maxAttempts')
  t.equal(c.migrator.takeoverAfterSeconds, 30)
  t.equal(c.migrator.rewriteServedManagedFields, false)
  t.strictSame(c.migrator.skipPhases, [])
  t.strictSame(c.migrator.crds, {})
  t.equal(c.annotations.migrating, 'ksvm.sigs.k8s.io/migrating', 'annotations.migrating')
  t.equal(c.migrator.selector.labelSelector, 'crd-migrator.io/managed=true', 'selector')
  t.strictSame(c.migrator.selector.names, [])
  t.equal(c.leaderElection.enabled, true, 'leaderElection.enabled')
  t.equal(c.leaderElection.leaseName, 'crd-migrator')
  t.equal(c.leaderElection.namespace, undefined)
  t.ok(c.leaderElection.renewDeadlineSeconds < c.leaderElection.leaseDurationSeconds, 'default lease timings are consistent')
  t.strictSame(c.identities.migratorUsers, ['system:serviceaccount:crd-migrator:crd-migrator'])
  t.strictSame(c.identities.breakGlassGroups, ['system:masters'])
  t.equal(c.logLevel, 'info')
  t.equal(c.kubeconfig, undefined)
  t.strictSame(loadConfig({ env: {}, flags: {} }), c, 'empty sources are the defaults')
})

t.test('an empty config file is the defaults', async (t) => {
  t.strictSame(loadConfig({ file: configFile(t, '') }), loadConfig())
})

t.test('JSON config files are YAML too', async (t) => {
  const c = loadConfig({ file: configFile(t, '{"migrator": {"concurrency": 3}}', 'config.json') })
  t.equal(c.migrator.concurrency, 3)
})

t.test('precedence: file < env < flags', async (t) => {
  const file = configFile(t, ['migrator:', '  concurrency: 4', '  qps: 10', '  pageSize: 50', 'webhook:', '  port: 1000'].join('\n'))
  const env = { CRD_MIGRATOR_CONCURRENCY: '8', CRD_MIGRATOR_QPS: '20', CRD_MIGRATOR_WEBHOOK_PORT: '2000' }

  const fileOnly = loadConfig({ file })
  t.equal(fileOnly.migrator.concurrency, 4, 'file over default')
  t.equal(fileOnly.migrator.qps, 10)

  const fileEnv = loadConfig({ file, env })
  t.equal(fileEnv.migrator.concurrency, 8, 'env over file')
  t.equal(fileEnv.migrator.qps, 20, 'env over file')
  t.equal(fileEnv.migrator.pageSize, 50, 'file keys env does not set survive')
  t.equal(fileEnv.webhook.port, 2000)

  const all = loadConfig({ file, env, flags: { 'migrator.concurrency': 12, 'webhook.port': 3000, 'migrator.qps': undefined } })
  t.equal(all.migrator.concurrency, 12, 'flag over env')
  t.equal(all.webhook.port, 3000, 'flag over env')
  t.equal(all.migrator.qps, 20, 'an undefined flag does not override')
  t.equal(all.migrator.pageSize, 50, 'file value still there')
  t.equal(all.migrator.maxAttempts, 8, 'untouched default')

  const flagsOverFile = loadConfig({ file, flags: { 'migrator.pageSize': 7 } })
  t.equal(flagsOverFile.migrator.pageSize, 7, 'flag over file')
  t.equal(flagsOverFile.migrator.concurrency, 4)
})

t.test('environment parsing', async (t) => {
  const c = loadConfig({
    env: {
      CRD_MIGRATOR_CONCURRENCY: '32',
      CRD_MIGRATOR_QPS: '2.5',
      CRD_MIGRATOR_MIGRATOR_USERS: 'alice, bob,,  carol ',
      CRD_MIGRATOR_CRDS: 'widgets.example.com',
      CRD_MIGRATOR_SKIP_PHASES: 'CleanupManagedFields',
      CRD_MIGRATOR_WEBHOOK_ENABLED: 'false',
      CRD_MIGRATOR_LEADER_ELECT: 'NO',
      CRD_MIGRATOR_REWRITE_SERVED_MANAGED_FIELDS: 'Yes',
      CRD_MIGRATOR_MIGRATOR_ENABLED: '1',
      CRD_MIGRATOR_SELECTOR: 'team in (a,b)',
      CRD_MIGRATOR_LEASE_NAME: '',
      POD_NAMESPACE: 'crd-migrator',
      UNRELATED: 'whatever',
    },
  })
  t.equal(c.migrator.concurrency, 32, 'int')
  t.equal(c.migrator.qps, 2.5, 'number')
  t.strictSame(c.identities.migratorUsers, ['alice', 'bob', 'carol'], 'list: split, trimmed, empty dropped')
  t.strictSame(c.migrator.selector.names, ['widgets.example.com'], 'one-element list')
  t.strictSame(c.migrator.skipPhases, ['CleanupManagedFields'])
  t.equal(c.webhook.enabled, false, 'boolean false')
  t.equal(c.leaderElection.enabled, false, 'boolean NO')
  t.equal(c.migrator.rewriteServedManagedFields, true, 'boolean Yes')
  t.equal(c.migrator.enabled, true, 'boolean 1')
  t.equal(c.migrator.selector.labelSelector, 'team in (a,b)', 'string with commas is not a list')
  t.equal(c.leaderElection.leaseName, 'crd-migrator', 'an empty variable is ignored')
  t.equal(c.leaderElection.namespace, 'crd-migrator', 'POD_NAMESPACE')
})

t.test('parseSettingValue', async (t) => {
  const setting = (path: string) => SETTINGS.find((s) => s.path === path)!
  t.equal(parseSettingValue(setting('migrator.concurrency'), ' 12 ', 'src'), 12, 'int with spaces')
  const changes = setting('migrator.acceptChanges')
  t.strictSame(parseSettingValue(changes, 'a.example.com:spec.x, b.example.com:spec.y', 'src'), [
    'a.example.com:spec.x',
    'b.example.com:spec.y',
  ])
  t.strictSame(
    parseSettingValue(changes, ['a.example.com:spec.x', 'a.example.com:spec.y,b.example.com:status'], '--accept-changes'),
    ['a.example.com:spec.x', 'a.example.com:spec.y', 'b.example.com:status'],
    'a list flag given twice keeps every value',
  )
  t.strictSame(
    parseSettingValue(changes, 'a.example.com:metadata.labels["x,y"],a.example.com:spec.z', 'src'),
    ['a.example.com:metadata.labels["x,y"]', 'a.example.com:spec.z'],
    'a comma inside quotes stays',
  )
  t.equal(parseSettingValue(setting('migrator.concurrency'), ['3', '12'], '--concurrency'), 12, 'a scalar flag given twice: the last')
  t.throws(
    () => parseSettingValue(setting('migrator.concurrency'), '1.5', 'src'),
    /src: expected an integer, got "1.5"/,
    'int rejects fractions',
  )
  try {
    parseSettingValue(setting('migrator.concurrency'), 'x', 'src')
    t.fail('should throw')
  } catch (err) {
    t.type(err, ConfigError, 'a ConfigError, as from the environment')
    t.equal((err as ConfigError).code, 'CRDM_CONFIG_INVALID')
  }
  t.throws(() => parseSettingValue(setting('migrator.concurrency'), '   ', 'src'), /expected an integer/, 'blank int')
  t.throws(
    () => parseSettingValue(setting('migrator.qps'), 'Infinity', 'src'),
    /expected a number, got "Infinity"/,
    'Infinity is not a number',
  )
  t.equal(parseSettingValue(setting('migrator.qps'), '1e2', 'src'), 100)
  t.equal(parseSettingValue(setting('webhook.enabled'), true, '--webhook'), true, 'boolean flag')
  t.throws(() => parseSettingValue(setting('migrator.qps'), true, '--qps'), /--qps: expects a value/, 'a bare flag for a value setting')
  t.throws(() => parseSettingValue(setting('webhook.enabled'), 'maybe', 'src'), /src: expected true or false, got "maybe"/)
  t.strictSame(parseSettingValue(setting('identities.migratorGroups'), ',', 'src'), [], 'list of nothing')
})

t.test('bad environment values name the field and the variable', async (t) => {
  expectError(
    t,
    () => loadConfig({ env: { CRD_MIGRATOR_CONCURRENCY: '0' } }),
    ['migrator.concurrency', 'environment variable CRD_MIGRATOR_CONCURRENCY'],
    'out of range',
  )
  expectError(
    t,
    () => loadConfig({ env: { CRD_MIGRATOR_CONCURRENCY: '2000' } }),
    ['migrator.concurrency', 'environment variable CRD_MIGRATOR_CONCURRENCY'],
    'too large',
  )
  expectError(
    t,
    () => loadConfig({ env: { CRD_MIGRATOR_LOG_LEVEL: 'loud' } }),
    ['logLevel', 'environment variable CRD_MIGRATOR_LOG_LEVEL'],
    'enum',
  )
  expectError(
    t,
    () => loadConfig({ env: { CRD_MIGRATOR_SKIP_PHASES: 'StorageVersionMigration,Nope' } }),
    ['migrator.skipPhases', 'environment variable CRD_MIGRATOR_SKIP_PHASES'],
    'bad phase',
  )
  expectError(
    t,
    () => loadConfig({ env: { CRD_MIGRATOR_CONCURRENCY: 'abc' } }),
    ['environment variable CRD_MIGRATOR_CONCURRENCY', '"abc"'],
    'not a number: names the variable',
  )
  expectError(
    t,
    () => loadConfig({ env: { CRD_MIGRATOR_WEBHOOK_ENABLED: 'nah' } }),
    ['environment variable CRD_MIGRATOR_WEBHOOK_ENABLED', 'true or false'],
    'not a boolean: names the variable',
  )
})

t.test('an unparsable environment value also names the field path', async (t) => {
  // loadConfig documents that "the message names every bad field and its source"; for values
  // that fail parseSettingValue the message names only the variable.
  const err = configError(() => loadConfig({ env: { CRD_MIGRATOR_CONCURRENCY: 'abc' } }))
  t.ok(err?.message.includes('migrator.concurrency'), 'mentions migrator.concurrency', {
    error: err?.message,
  })
})

t.test('bad flag values name the field and the flag', async (t) => {
  expectError(t, () => loadConfig({ flags: { 'migrator.qps': -1 } }), ['migrator.qps', 'flag --qps'], 'negative qps')
  expectError(t, () => loadConfig({ flags: { 'webhook.port': 70000 } }), ['webhook.port', 'flag --webhook-port'], 'port')
  expectError(
    t,
    () => loadConfig({ env: { CRD_MIGRATOR_QPS: '5' }, flags: { 'migrator.qps': -1 } }),
    ['migrator.qps', 'flag --qps'],
    'the flag is blamed, not the env it overrode',
  )
  const err = configError(() => loadConfig({ env: { CRD_MIGRATOR_QPS: '5' }, flags: { 'migrator.qps': -1 } }))
  t.notOk(err?.message.includes('CRD_MIGRATOR_QPS'), 'the overridden variable is not blamed')
})

t.test('bad file values name the field and the file', async (t) => {
  const file = configFile(t, 'migrator:\n  concurrency: 0\n  pageSize: "many"\n')
  expectError(t, () => loadConfig({ file }), ['migrator.concurrency', 'migrator.pageSize', `config file ${file}`], 'two bad fields')
  const err = configError(() => loadConfig({ file }))
  t.equal(err?.message.split('\n').filter((l) => l.includes(`[from config file ${file}]`)).length, 2, 'each issue names the file')

  const fixed = configFile(t, 'migrator:\n  concurrency: 0\n')
  t.equal(loadConfig({ file: fixed, env: { CRD_MIGRATOR_CONCURRENCY: '3' } }).migrator.concurrency, 3, 'env can fix a bad file value')
})

t.test('unknown keys in the file are rejected by name', async (t) => {
  const nested = configFile(t, 'migrator:\n  concurrencyy: 4\n')
  expectError(t, () => loadConfig({ file: nested }), ['migrator', 'concurrencyy', `config file ${nested}`], 'nested typo')
  const deep = configFile(t, 'migrator:\n  selector:\n    label: x\n')
  expectError(t, () => loadConfig({ file: deep }), ['migrator.selector', 'label'], 'deeper typo')
  const top = configFile(t, 'webhooks:\n  port: 1\n')
  expectError(t, () => loadConfig({ file: top }), ['webhooks'], 'top-level typo')
  const perCrd = configFile(t, 'migrator:\n  crds:\n    widgets.example.com:\n      qpss: 1\n')
  expectError(t, () => loadConfig({ file: perCrd }), ['qpss', `config file ${perCrd}`], 'per-CRD typo')
})

t.test('an unknown top-level key names the file it came from', async (t) => {
  const top = configFile(t, 'webhooks:\n  port: 1\n')
  const err = configError(() => loadConfig({ file: top }))
  t.ok(err?.message.includes(`config file ${top}`), 'names the file', {
    error: err?.message,
  })
})

t.test('unreadable or malformed files', async (t) => {
  const missing = join(t.testdir({}), 'nope.yaml')
  expectError(t, () => loadConfig({ file: missing }), ['cannot read config file', missing, 'ENOENT'], 'missing file')
  // Refused when opened, never waited on or read (issue 44, item 4: completion reads --config too).
  const fifo = join(t.testdir({}), 'fifo')
  execFileSync('mkfifo', [fifo])
  expectError(t, () => loadConfig({ file: fifo }), [`config file ${fifo} is a FIFO, not a regular file`], 'a FIFO')
  expectError(t, () => loadConfig({ file: '/dev/zero' }), ['config file /dev/zero is a character device, not a regular file'], '/dev/zero')
  const bad = configFile(t, 'migrator: [1\n')
  expectError(t, () => loadConfig({ file: bad }), [`config file ${bad} is not valid YAML`], 'invalid YAML')
  const list = configFile(t, '- migrator\n- webhook\n')
  expectError(t, () => loadConfig({ file: list }), [`config file ${list} must hold a mapping at the top level`], 'a list')
  const scalar = configFile(t, '42\n')
  expectError(t, () => loadConfig({ file: scalar }), ['must hold a mapping'], 'a scalar')
  const notMap = configFile(t, 'migrator: 5\n')
  expectError(t, () => loadConfig({ file: notMap }), ['migrator', `config file ${notMap}`], 'a section that is not a mapping')
})

t.test('annotation key validation', async (t) => {
  for (const key of ['Bad Key', 'example.com/', '/migrating', 'EXAMPLE.com/migrating', 'a/b/c', `example.com/${'x'.repeat(64)}`]) {
    expectError(
      t,
      () => loadConfig({ flags: { 'annotations.migrating': key } }),
      ['annotations.migrating', 'Kubernetes annotation key', 'flag --migrating-annotation'],
      JSON.stringify(key),
    )
  }
  for (const key of ['example.com/frozen', 'migrating', 'a.b-c.d/x_y.z', `example.com/${'x'.repeat(63)}`]) {
    t.equal(loadConfig({ flags: { 'annotations.migrating': key } }).annotations.migrating, key, `${key} accepted`)
  }
})

t.test('lease timings', async (t) => {
  const file = configFile(t, 'leaderElection:\n  leaseDurationSeconds: 15\n  renewDeadlineSeconds: 15\n')
  expectError(
    t,
    () => loadConfig({ file }),
    ['leaderElection.renewDeadlineSeconds', 'less than leaseDurationSeconds', `config file ${file}`],
    'equal',
  )
  const longer = configFile(t, 'leaderElection:\n  renewDeadlineSeconds: 20\n')
  expectError(
    t,
    () => loadConfig({ file: longer }),
    ['renewDeadlineSeconds must be less than leaseDurationSeconds'],
    'longer than the default lease',
  )
  const ok = configFile(t, 'leaderElection:\n  leaseDurationSeconds: 60\n  renewDeadlineSeconds: 40\n')
  const c = loadConfig({ file: ok })
  t.equal(c.leaderElection.leaseDurationSeconds, 60)
  t.equal(c.leaderElection.renewDeadlineSeconds, 40)
})

t.test('per-CRD entries', async (t) => {
  const file = configFile(
    t,
    [
      'migrator:',
      '  crds:',
      '    widgets.example.com:',
      '      useStatusSubresource: true',
      '      skipPhases: [CleanupManagedFields]',
      '      concurrency: 2',
      '      qps: 5',
      '    gadgets.example.com: {}',
    ].join('\n'),
  )
  const c = loadConfig({ file })
  t.strictSame(c.migrator.crds['widgets.example.com'], {
    useStatusSubresource: true,
    skipPhases: ['CleanupManagedFields'],
    concurrency: 2,
    qps: 5,
  })
  t.strictSame(c.migrator.crds['gadgets.example.com'], { useStatusSubresource: false, skipPhases: [] }, 'defaults inside an entry')

  const badPhase = configFile(t, 'migrator:\n  crds:\n    widgets.example.com:\n      skipPhases: [StorageVersionMigration, Cleanup]\n')
  expectError(
    t,
    () => loadConfig({ file: badPhase }),
    ['migrator.crds', 'skipPhases', 'CleanupManagedFields', `config file ${badPhase}`],
    'bad phase name',
  )
  const badConcurrency = configFile(t, 'migrator:\n  crds:\n    widgets.example.com:\n      concurrency: 0\n')
  expectError(t, () => loadConfig({ file: badConcurrency }), ['migrator.crds', 'concurrency'], 'bad per-CRD concurrency')
})

t.test('the schema accepts what loadConfig produces', async (t) => {
  const c = loadConfig({ env: { CRD_MIGRATOR_CONCURRENCY: '3' } })
  t.strictSame(ConfigSchema.parse(c), c, 'idempotent')
})

t.test('every setting maps to a distinct flag, variable and schema path', async (t) => {
  t.equal(new Set(SETTINGS.map((s) => s.flag)).size, SETTINGS.length, 'flags unique')
  t.equal(new Set(SETTINGS.map((s) => s.env)).size, SETTINGS.length, 'env vars unique')
  t.equal(new Set(SETTINGS.map((s) => s.path)).size, SETTINGS.length, 'paths unique')
  const defaults = loadConfig() as unknown as Record<string, unknown>
  for (const s of SETTINGS) {
    const parent = s.path
      .split('.')
      .slice(0, -1)
      .reduce<unknown>((o, k) => (o as Record<string, unknown>)[k], defaults)
    t.type(parent, 'object', `${s.path}: its section exists in the config`)
  }
})

t.test('settingsFor', async (t) => {
  const file = configFile(
    t,
    [
      'annotations:',
      '  migrating: example.com/frozen',
      'migrator:',
      '  concurrency: 8',
      '  qps: 100',
      '  pageSize: 250',
      '  maxAttempts: 3',
      '  progressIntervalSeconds: 2.5',
      '  takeoverAfterSeconds: 45',
      '  rewriteServedManagedFields: true',
      '  skipPhases: [CleanupManagedFields]',
      '  crds:',
      '    widgets.example.com:',
      '      concurrency: 2',
      '      qps: 0',
      '      useStatusSubresource: true',
      '    gadgets.example.com:',
      '      skipPhases: [StorageVersionMigration]',
      '      engine: builtin',
    ].join('\n'),
  )
  const config = loadConfig({ file })

  t.strictSame(
    settingsFor(config, 'widgets.example.com'),
    {
      migratingAnnotation: 'example.com/frozen',
      phases: ['StorageVersionMigration', 'StashedObjectMigration'],
      useStatusSubresource: true,
      concurrency: 2,
      qps: 0,
      pageSize: 250,
      maxAttempts: 3,
      progressIntervalMs: 2500,
      rewriteServedManagedFields: true,
      takeoverAfterMs: 45_000,
      conversionOutageLimitMs: 300_000,
      storageSettleTimeoutMs: 120_000,
      engine: 'own',
      losslessCheck: true,
      acceptedRemovals: [],
      acceptedChanges: [],
      builtinStartTimeoutMs: 120_000,
    },
    'per-CRD overrides, qps 0 included',
  )

  const gadgets = settingsFor(config, 'gadgets.example.com')
  t.strictSame(gadgets.phases, ['StashedObjectMigration'], 'skipPhases are the union of global and per-CRD')
  t.equal(gadgets.concurrency, 8, 'global concurrency')
  t.equal(gadgets.qps, 100, 'global qps')
  t.equal(gadgets.useStatusSubresource, false)
  t.equal(gadgets.engine, 'builtin', 'per-CRD engine')
  t.throws(
    () => loadConfig({ flags: { 'migrator.engine': 'kcm' } }),
    /migrator\.engine: .*"own" \| "builtin"|migrator\.engine: Invalid option/,
    'an engine that does not exist is refused, naming the field',
  )

  const other = settingsFor(config, 'others.example.com')
  t.strictSame(other.phases, ['StorageVersionMigration', 'StashedObjectMigration'], 'only the global skip')
  t.equal(other.concurrency, 8)
  t.equal(other.useStatusSubresource, false)

  const plain = settingsFor(loadConfig(), 'widgets.example.com')
  t.strictSame(
    plain.phases,
    ['StorageVersionMigration', 'StashedObjectMigration', 'CleanupManagedFields'],
    'all phases by default, in order',
  )
  t.equal(plain.migratingAnnotation, 'ksvm.sigs.k8s.io/migrating')
  t.equal(plain.concurrency, 64)
  t.equal(plain.qps, 0)
  t.equal(plain.progressIntervalMs, 5000)
  t.equal(plain.takeoverAfterMs, 30_000)
})
