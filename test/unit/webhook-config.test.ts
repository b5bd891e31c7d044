import { execFileSync } from 'node:child_process'
import { mkdtemp, readFile, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import t from 'tap'
import { parse } from 'yaml'
import { DEFAULT_MIGRATING_ANNOTATION } from '../../src/config/annotations.js'
import {
  celString,
  migrationStateMatchExpression,
  notMigratorMatchExpression,
  renderWebhookConfiguration,
  freezeAllowedExpression,
  renderWebhookConfigurationYaml,
} from '../../src/webhook/configuration.js'
import {
  localWebhookConfigurationYaml,
  readCaPem,
  webhookConfigInputs,
  writeOutFile,
  type WebhookConfigFlags,
} from '../../src/webhook/local-configuration.js'
import { ConfigError } from '../../src/errors.js'
import { generateDevCertificates } from '../../dev/certs/devcerts.js'

const repoRoot = fileURLToPath(new URL('../../', import.meta.url))

t.test('webhook-config/validating-webhook.yaml equals the service render', async (t) => {
  const file = await readFile(join(repoRoot, 'webhook-config/validating-webhook.yaml'), 'utf8')
  t.same(parse(file), renderWebhookConfiguration({ mode: 'service' }))
})

t.test('service variant: rules, policy and cert-manager injection', async (t) => {
  const config = renderWebhookConfiguration({ mode: 'service' })
  const webhook = config.webhooks[0]!
  t.equal(config.metadata.annotations?.['cert-manager.io/inject-ca-from'], 'crd-migrator/crd-migrator-serving')
  t.same(
    webhook.rules,
    [
      {
        apiGroups: ['apiextensions.k8s.io'],
        apiVersions: ['v1'],
        operations: ['CREATE', 'UPDATE', 'DELETE'],
        resources: ['customresourcedefinitions'],
        scope: 'Cluster',
      },
      {
        apiGroups: ['apiextensions.k8s.io'],
        apiVersions: ['v1'],
        operations: ['UPDATE'],
        resources: ['customresourcedefinitions/status'],
        scope: 'Cluster',
      },
    ],
    'CRDs and their /status, where annotations and storedVersions can change too',
  )
  t.match(webhook, {
    name: 'storage-freeze.crd-migrator.io',
    failurePolicy: 'Fail',
    sideEffects: 'None',
    admissionReviewVersions: ['v1'],
    matchPolicy: 'Equivalent',
    timeoutSeconds: 5,
    clientConfig: { service: { namespace: 'crd-migrator', name: 'crd-migrator', path: '/validate-crd', port: 443 } },
  })
  t.notOk('caBundle' in webhook.clientConfig, 'left to cert-manager')
})

t.test('url variant for local development carries the CA', async (t) => {
  const pem = '-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n'
  const config = renderWebhookConfiguration({ mode: 'url', url: 'https://127.0.0.1:9443/validate-crd', caBundlePem: pem })
  const clientConfig = config.webhooks[0]!.clientConfig
  t.equal(clientConfig.url, 'https://127.0.0.1:9443/validate-crd')
  t.notOk(clientConfig.service)
  t.equal(Buffer.from(clientConfig.caBundle!, 'base64').toString('utf8'), pem)
  t.notOk(config.metadata.annotations, 'no cert-manager annotation when the CA is given')
  t.throws(() => renderWebhookConfiguration({ mode: 'url' }), /needs a url/)
  t.throws(() => renderWebhookConfiguration({ mode: 'url', url: 'http://127.0.0.1:9443/validate-crd' }), /must be https/)
})

t.test(
  'matchConditions test old and new object for the annotation, new state annotations and a running built-in migration, null-safe',
  async (t) => {
    const expression = migrationStateMatchExpression('example.com/frozen')
    t.equal(
      expression,
      "(object != null && has(object.metadata.annotations) && 'example.com/frozen' in object.metadata.annotations) || " +
        "(oldObject != null && has(oldObject.metadata.annotations) && 'example.com/frozen' in oldObject.metadata.annotations) || " +
        "(object != null && has(object.metadata.annotations) && object.metadata.annotations.exists(k, k.startsWith('crd-migrator.io/') && " +
        '(oldObject == null || !has(oldObject.metadata.annotations) || !(k in oldObject.metadata.annotations) || ' +
        'oldObject.metadata.annotations[k] != object.metadata.annotations[k]))) || ' +
        "(oldObject != null && has(oldObject.status) && has(oldObject.status.conditions) && oldObject.status.conditions != null && oldObject.status.conditions.exists(c, c.type == 'StorageMigrating' && c.status == 'True') && " +
        '(object == null || object.spec != oldObject.spec)) || ' +
        '(object != null && oldObject != null && ' +
        "(has(object.status) && has(object.status.conditions) && object.status.conditions != null ? object.status.conditions.filter(c, c.type == 'StorageMigrating').map(c, c.status) : []) != " +
        "(has(oldObject.status) && has(oldObject.status.conditions) && oldObject.status.conditions != null ? oldObject.status.conditions.filter(c, c.type == 'StorageMigrating').map(c, c.status) : []) && " +
        '!(request.userInfo.username in ["system:kube-controller-manager"] || ' +
        '(request.userInfo.username in ["system:serviceaccount:kube-system:storage-version-migrator-controller"] && has(request.userInfo.extra) && ' +
        '"authentication.kubernetes.io/credential-id" in request.userInfo.extra && ' +
        'request.userInfo.extra["authentication.kubernetes.io/credential-id"].exists(c, c.startsWith("JTI=")))))',
      'and a change of the StorageMigrating condition by anyone but kube-controller-manager (its ServiceAccount with a token only)',
    )
    const config = renderWebhookConfiguration({ mode: 'service', annotationKey: 'example.com/frozen' })
    t.same(config.webhooks[0]!.matchConditions[0], { name: 'migration-state-involved', expression })
    t.throws(() => migrationStateMatchExpression("x' || true || 'y"), /not a valid annotation key/)
    t.match(
      migrationStateMatchExpression('example.com/frozen', []),
      /\|\| \(object != null && oldObject != null && [^|]*\.map\(c, c\.status\) : \[\]\)\)$/,
      'no kube-controller-manager identity: every change of the condition is sent',
    )
    t.match(
      migrationStateMatchExpression('example.com/frozen', ['kcm']),
      /&& !\(request\.userInfo\.username in \["kcm"\]\)\)$/,
      'other identities, as listed',
    )
    const custom = renderWebhookConfiguration({ mode: 'service', builtinMigratorUsers: ['kcm'] })
    t.equal(custom.webhooks[0]!.matchConditions[0]!.expression, migrationStateMatchExpression(DEFAULT_MIGRATING_ANNOTATION, ['kcm']))
  },
)

t.test('webhook-config renders the url variant with the CA given, to stdout or a file', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'crd-migrator-webhook-config-'))
  t.teardown(() => rm(dir, { recursive: true, force: true }))
  const certs = await generateDevCertificates(join(dir, 'certs'))
  const inputs = webhookConfigInputs({ ca: certs.caCertFile, port: '19443' })
  t.equal(inputs.outFile, undefined, 'stdout by default')
  const yaml = localWebhookConfigurationYaml(inputs, readCaPem(inputs.ca))
  const parsed = parse(yaml)
  t.equal(parsed.webhooks[0].clientConfig.url, 'https://127.0.0.1:19443/validate-crd')
  t.equal(Buffer.from(parsed.webhooks[0].clientConfig.caBundle, 'base64').toString('utf8'), certs.caCertPem)
  const bundle = Buffer.from(certs.caCertPem).toString('base64')
  const fromBundle = webhookConfigInputs({ caBundle: bundle, port: '19443' })
  t.equal(localWebhookConfigurationYaml(fromBundle, readCaPem(fromBundle.ca)), yaml, '--ca-bundle renders the same as --ca')
  const ipv6 = webhookConfigInputs({ ca: certs.caCertFile, host: '::1' })
  t.equal(parse(localWebhookConfigurationYaml(ipv6, certs.caCertPem)).webhooks[0].clientConfig.url, 'https://[::1]:9443/validate-crd')
  const outFile = join(dir, 'local', 'validating-webhook.yaml')
  await writeOutFile(outFile, yaml)
  t.equal(await readFile(outFile, 'utf8'), yaml, '--out FILE writes the same text, its directory created')
  t.same(parse(renderWebhookConfigurationYaml({ mode: 'service' })), renderWebhookConfiguration({ mode: 'service' }))
})

t.test('webhook-config flags: what each one accepts and refuses (ConfigError: exit 2)', async (t) => {
  const cases: Array<[string, WebhookConfigFlags, RegExp | { outFile: string | undefined; host?: string; port?: number }]> = [
    ['no CA', {}, /name the CA .*--ca FILE.*--ca-bundle BASE64/],
    ['both CAs', { ca: 'a', caBundle: 'b' }, /not both/],
    ['empty --ca', { ca: ' ' }, /--ca needs a file name/],
    ['--ca-bundle not base64', { caBundle: 'not base64!' }, /--ca-bundle is not base64/],
    ['--ca-bundle of no PEM', { caBundle: Buffer.from('hello').toString('base64') }, /--ca-bundle holds no PEM certificate/],
    ['port 0', { ca: 'x', port: '0' }, /--port must be a whole number from 1 to 65535, got "0"/],
    ['port 65536', { ca: 'x', port: '65536' }, /--port must be a whole number/],
    ['port not a number', { ca: 'x', port: '94a3' }, /--port must be a whole number/],
    ['port negative', { ca: 'x', port: '-1' }, /--port must be a whole number/],
    ['empty host', { ca: 'x', host: ' ' }, /--host must not be empty/],
    ['host with a path', { ca: 'x', host: 'a/b' }, /not a host name/],
    ['bad annotation key', { ca: 'x', migratingAnnotation: 'no spaces allowed' }, /--migrating-annotation .* not a valid annotation key/],
    ['empty --out', { ca: 'x', out: '' }, /--out needs a file name, or - for stdout/],
    ['defaults', { ca: 'x' }, { outFile: undefined, host: '127.0.0.1', port: 9443 }],
    ['--out - is stdout', { ca: 'x', out: '-' }, { outFile: undefined }],
    ['--out FILE', { ca: 'x', out: 'o.yaml' }, { outFile: 'o.yaml' }],
    ['port 65535', { ca: 'x', port: '65535' }, { outFile: undefined, port: 65535 }],
  ]
  for (const [name, flags, want] of cases) {
    if (want instanceof RegExp) {
      t.throws(() => webhookConfigInputs(flags), want, name)
      t.throws(() => webhookConfigInputs(flags), ConfigError, `${name}: a ConfigError`)
    } else {
      t.match(webhookConfigInputs(flags), want, name)
    }
  }
})

t.test('--ca that is missing, or not a PEM certificate: ConfigError naming the file', async (t) => {
  const dir = t.testdir({
    'key.pem': '-----BEGIN PRIVATE KEY-----\nMIIB\n-----END PRIVATE KEY-----\n',
    'garbage.pem': '-----BEGIN CERTIFICATE-----\nnot base64 at all\n-----END CERTIFICATE-----\n',
  })
  const fifo = join(dir, 'fifo')
  execFileSync('mkfifo', [fifo])
  const cases: Array<[string, string, RegExp]> = [
    ['missing', join(dir, 'nope.crt'), /cannot read --ca .*nope\.crt: ENOENT/],
    ['a key, no certificate', join(dir, 'key.pem'), /--ca .*key\.pem holds no PEM certificate/],
    ['a broken certificate', join(dir, 'garbage.pem'), /--ca .*garbage\.pem holds a PEM block that is not a certificate/],
    ['a directory', dir, /^webhook-config: --ca .* is a directory, not a regular file/],
    // Refused when opened, never waited on or read (issue 44, item 4).
    ['a FIFO', fifo, /^webhook-config: --ca .*fifo is a FIFO, not a regular file/],
    ['/dev/zero', '/dev/zero', /^webhook-config: --ca \/dev\/zero is a character device, not a regular file/],
  ]
  for (const [name, file, want] of cases) {
    t.throws(() => readCaPem({ file }), want, name)
    t.throws(() => readCaPem({ file }), ConfigError, `${name}: a ConfigError`)
  }
})

t.test('a second matchCondition lets the migrator identities past the webhook', async (t) => {
  const config = renderWebhookConfiguration({ mode: 'service' })
  const saProof =
    '"authentication.kubernetes.io/credential-id" in request.userInfo.extra && ' +
    'request.userInfo.extra["authentication.kubernetes.io/credential-id"].exists(c, c.startsWith("JTI="))'
  t.same(
    config.webhooks[0]!.matchConditions[1],
    {
      name: 'not-the-migrator',
      expression: `!((request.userInfo.username in ["system:serviceaccount:crd-migrator:crd-migrator"] && has(request.userInfo.extra) && ${saProof}))`,
    },
    "the default migrator identity, the Helm chart's ServiceAccount, with a ServiceAccount token only",
  )
  t.equal(
    notMigratorMatchExpression(['a', 'b'], ['ops', 'bots']),
    '!(request.userInfo.username in ["a","b"] || request.userInfo.groups.exists(g, g in ["ops","bots"]))',
    'names that are not ServiceAccounts are taken as they are',
  )
  t.equal(
    notMigratorMatchExpression(['a', 'system:serviceaccount:x:y'], []),
    `!(request.userInfo.username in ["a"] || (request.userInfo.username in ["system:serviceaccount:x:y"] && has(request.userInfo.extra) && ${saProof}))`,
  )
  t.equal(notMigratorMatchExpression([], ['ops']), '!(request.userInfo.groups.exists(g, g in ["ops"]))')
  t.equal(notMigratorMatchExpression([], []), undefined)
  const none = renderWebhookConfiguration({ mode: 'service', migratorUsers: [], migratorGroups: [] })
  t.same(
    none.webhooks[0]!.matchConditions.map((c) => c.name),
    ['migration-state-involved', 'freeze-not-allowed-by-rbac'],
    'no identities: no condition',
  )
})

t.test('two entries: the API server asks its authorizer for verb freeze on the CRD and picks the path', async (t) => {
  const allowed =
    'authorizer.group("apiextensions.k8s.io").resource("customresourcedefinitions").name(request.name).check("freeze").allowed()'
  t.equal(freezeAllowedExpression(), allowed)
  const service = renderWebhookConfiguration({ mode: 'service' })
  t.same(
    service.webhooks.map((w) => [w.name, w.clientConfig.service?.path, w.matchConditions.map((c) => c.name)]),
    [
      ['storage-freeze.crd-migrator.io', '/validate-crd', ['migration-state-involved', 'not-the-migrator', 'freeze-not-allowed-by-rbac']],
      [
        'storage-freeze-rbac.crd-migrator.io',
        '/validate-crd/freeze-allowed',
        ['migration-state-involved', 'not-the-migrator', 'freeze-allowed-by-rbac'],
      ],
    ],
    'the authorizer is asked last: only for requests that reach the webhook anyway',
  )
  t.same(service.webhooks[0]!.matchConditions.at(-1), { name: 'freeze-not-allowed-by-rbac', expression: `!${allowed}` })
  t.same(service.webhooks[1]!.matchConditions.at(-1), { name: 'freeze-allowed-by-rbac', expression: allowed })
  const { name: _a, clientConfig: _b, matchConditions: _c, ...first } = service.webhooks[0]!
  const { name: _d, clientConfig: _e, matchConditions: _f, ...second } = service.webhooks[1]!
  t.same(second, first, 'otherwise the same entry (rules, failurePolicy, timeout)')
  t.same(service.webhooks[1]!.matchConditions.slice(0, -1), service.webhooks[0]!.matchConditions.slice(0, -1))
  const url = renderWebhookConfiguration({ mode: 'url', url: 'https://127.0.0.1:9443/validate-crd', caBundlePem: 'PEM' })
  t.same(
    url.webhooks.map((w) => w.clientConfig.url),
    ['https://127.0.0.1:9443/validate-crd', 'https://127.0.0.1:9443/validate-crd/freeze-allowed'],
  )
  t.equal(url.webhooks[1]!.clientConfig.caBundle, url.webhooks[0]!.clientConfig.caBundle, 'the same CA')
})

t.test("CEL string literals: quotes escaped, and <, >, & as Go's encoding/json (Helm toJson) writes them", async (t) => {
  t.equal(celString('system:serviceaccount:ns:sa'), '"system:serviceaccount:ns:sa"')
  t.equal(celString('a"b\\c'), '"a\\"b\\\\c"')
  t.equal(celString("x' || true || 'y"), '"x\' || true || \'y"', 'a single quote cannot end a double-quoted literal')
  t.equal(celString('<a&b>'), '"\\u003ca\\u0026b\\u003e"')
  t.equal(celString('\u2028'), '"\\u2028"')
})
