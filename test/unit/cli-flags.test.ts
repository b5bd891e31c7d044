/**
 * kubectl's flags as parsed here (issue #36, item 3): --request-timeout durations, -v as a
 * log level, --dry-run strategies, --as merged over the kubeconfig's impersonation, and
 * the output forms (-o name, wide, json/yaml as data).
 */
import assert from 'node:assert'
import t from 'tap'
import { InvalidArgumentError } from 'commander'
import { clientFlags, parseRequestTimeout, verbosityLevel } from '../../src/cli/command-kit.js'
import { resolveDryRun } from '../../src/cli/migrate/migrate.js'
import { outputFormat, renderNames } from '../../src/cli/output.js'
import { withImpersonation } from '../../src/kube/client.js'
import type { KubeContext } from '../../src/kube/kubeconfig.js'
import type { StatusRow } from '../../src/cli/status/run-status.js'

const { statusData, formatTable } = await t.mockImport<typeof import('../../src/cli/status/run-status.js')>(
  '../../src/cli/status/run-status.js',
  {
    '../../src/kube/client.js': { kubeHttp: () => assert.fail('no cluster in unit tests') },
  },
)
t.test('--request-timeout: kubectl durations, in milliseconds', async (t) => {
  const rows: Array<[string, number]> = [
    ['0', 0],
    ['30', 30_000],
    ['30s', 30_000],
    ['1m', 60_000],
    ['1h', 3_600_000],
    ['1m30s', 90_000],
    ['500ms', 500],
    ['1.5s', 1500],
    ['0s', 0],
    ['1ns', 1], // rounded up: a tiny value is still a deadline, not none
  ]
  for (const [text, ms] of rows) t.equal(parseRequestTimeout(text), ms, text)
  for (const bad of ['', '-1', '5x', '1 m', 's', '1d', 'abc', '-5s'])
    t.throws(() => parseRequestTimeout(bad), InvalidArgumentError, `refused: ${JSON.stringify(bad)}`)
})

t.test('-v N as a log level', async (t) => {
  const rows: Array<[number, string]> = [
    [0, 'warn'],
    [1, 'warn'],
    [2, 'info'],
    [3, 'info'],
    [4, 'debug'],
    [5, 'debug'],
    [6, 'trace'],
    [9, 'trace'],
  ]
  for (const [n, level] of rows) t.equal(verbosityLevel(n), level, `-v ${n}`)
})

t.test('--dry-run: bare is client, =VALUE must be a strategy, a name after a bare flag is a name', async (t) => {
  t.same(resolveDryRun(undefined, []), { strategy: 'none' })
  t.same(resolveDryRun(true, ['--dry-run']), { strategy: 'client' })
  for (const s of ['none', 'client', 'server']) t.same(resolveDryRun(s, [`--dry-run=${s}`]), { strategy: s })
  t.same(resolveDryRun('server', ['--dry-run', 'server']), { strategy: 'server' })
  t.same(resolveDryRun('widgets.example.com', ['--dry-run', 'widgets.example.com']), {
    strategy: 'client',
    name: 'widgets.example.com',
  })
  t.throws(() => resolveDryRun('bogus', ['--dry-run=bogus']), { code: 'CRDM_CONFIG_INVALID', message: /none.*client.*server/ })
})

t.test('--as, --as-group, --as-uid over the kubeconfig user', async (t) => {
  const context = (impersonate?: KubeContext['user']['impersonate']): KubeContext => ({
    name: 'c',
    cluster: { name: 'c', server: new URL('https://127.0.0.1:6443'), insecureSkipTlsVerify: false },
    user: { name: 'u', ...(impersonate ? { impersonate } : {}) },
    origin: 'test',
  })
  t.equal(withImpersonation(context(), undefined).user.impersonate, undefined, 'no flags: as the kubeconfig says')
  t.same(withImpersonation(context(), { user: 'jane', groups: ['a', 'b'] }).user.impersonate, {
    user: 'jane',
    groups: ['a', 'b'],
    extra: {},
  })
  const fromKubeconfig = { user: 'kc', groups: ['kg'], uid: '7', extra: { scopes: ['x'] } }
  t.same(
    withImpersonation(context(fromKubeconfig), { user: 'jane' }).user.impersonate,
    { user: 'jane', uid: '7', groups: ['kg'], extra: { scopes: ['x'] } },
    '--as replaces as, the rest stays',
  )
  t.same(withImpersonation(context(fromKubeconfig), { groups: ['g2'] }).user.impersonate?.groups, ['g2'], '--as-group replaces as-groups')
  t.throws(() => withImpersonation(context(), { groups: ['g'] }), { code: 'CRDM_CONFIG_INVALID', message: /--as/ }, 'groups without a user')
  t.throws(() => withImpersonation(context(), { uid: '1' }), { code: 'CRDM_CONFIG_INVALID' }, 'a uid without a user')
  t.same(clientFlags({ as: 'jane', asGroup: ['g'], requestTimeout: 5000 }), {
    requestTimeoutMs: 5000,
    impersonate: { user: 'jane', uid: undefined, groups: ['g'] },
  })
  t.same(clientFlags({}), {}, 'no flags, nothing')
})

t.test('-o: the formats a command offers', async (t) => {
  t.equal(outputFormat({}), 'text')
  t.equal(outputFormat({ json: true }), 'json')
  t.equal(outputFormat({ output: 'wide' }, ['text', 'wide']), 'wide')
  t.throws(() => outputFormat({ output: 'wide' }), { code: 'CRDM_CONFIG_INVALID' }, 'not where it means nothing')
  t.equal(
    renderNames(['a.example.com', 'b.example.com']),
    'customresourcedefinition.apiextensions.k8s.io/a.example.com\ncustomresourcedefinition.apiextensions.k8s.io/b.example.com\n',
  )
})

const row = (over: Partial<StatusRow> = {}): StatusRow => ({
  name: 'widgets.example.com',
  storage: 'v2',
  storedVersions: 'v1,v2',
  frozen: '-',
  heartbeat: '-',
  phase: '-',
  progress: '-',
  lastResult: 'Succeeded',
  duration: '-',
  builtin: '-',
  state: 'Idle' as StatusRow['state'],
  ...over,
})

t.test('status as data: lists are lists, absent is absent', async (t) => {
  t.same(statusData(row()), {
    name: 'widgets.example.com',
    storage: 'v2',
    storedVersions: ['v1', 'v2'],
    lastResult: 'Succeeded',
    state: 'Idle',
    frozen: false,
  })
  t.match(statusData(row({ frozen: 'no' })), { frozen: false }, 'not frozen: false, not "no"')
  t.notOk('frozenBy' in statusData(row({ frozen: 'no' })))
  t.match(
    statusData(row({ frozen: 'yes (crd-migrator-7d9f-abc)', frozenBy: 'crd-migrator-7d9f-abc' })),
    { frozen: true, frozenBy: 'crd-migrator-7d9f-abc' },
    'frozen: true, and by whom',
  )
  t.match(statusData(row({ frozen: 'yes (built-in)', frozenBy: 'built-in' })), { frozen: true, frozenBy: 'built-in' })
  const none = statusData(row({ storage: '-', storedVersions: '-', etaSeconds: 12 }))
  t.same(none.storedVersions, [], 'no storedVersions: an empty list')
  t.notOk('storage' in none, 'no storage version: no key')
  t.equal(none['etaSeconds'], 12)
  t.notOk(Object.values(none).includes('-'), 'no "-" anywhere')
})

t.test('status -o wide: STATE and ETA columns', async (t) => {
  const text = formatTable([row({ etaSeconds: 40 })], undefined, true)
  const [header, line] = text.split('\n')
  t.match(header, /BUILT-IN MIGRATION\s+STATE\s+ETA$/)
  t.match(line, /Idle\s+40s$/)
  t.notMatch(formatTable([row()]).split('\n')[0], /STATE/, 'not without wide')
})
