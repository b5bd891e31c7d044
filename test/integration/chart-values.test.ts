/**
 * The Helm chart's values: bad ones refused with a message (values.schema.json and the
 * templates' own checks), the API groups the template refuses on its own (every group
 * kube-apiserver serves, "*" and ""), values.yaml documented, and what the stash and
 * StorageVersionMigration values render (the CRD the chart installs is the one of
 * kube-storage-version-migrator's Go module). Shared setup: test/helpers/chart.ts.
 */
import { spawnSync } from 'node:child_process'
import { readFile } from 'node:fs/promises'
import { join } from 'node:path'
import t from 'tap'
import { parseAllDocuments } from 'yaml'
import { PHASE_NAMES, STASH_PRESETS } from '../../src/config/schema.js'
import { PRESETS } from '../../src/migrator/phases/stashes/rules.js'
import { uniqueName } from '../helpers/controlplane.js'
import {
  chartDir,
  configOf,
  cp,
  helm,
  ids,
  loadRenderedConfig,
  type Manifest,
  one,
  RBAC_KINDS,
  repoRoot,
  rulesOf,
  template,
  valuesArgs,
  migratorClusterRole,
} from '../helpers/chart.js'
import { BASE_RULES, EXPLICIT_STASH_RULE, migratorEnabled, stashRbac, SVM_CRD, SVM_RULES } from '../helpers/chart-scenarios.js'

t.test("the chart's stash presets and phases are the migrator's", async (t) => {
  const schema = JSON.parse(await readFile(join(chartDir, 'values.schema.json'), 'utf8')) as {
    properties: { migrator: { properties: Record<string, any> } }
  }
  const m = schema.properties.migrator.properties
  t.same(m['stashPresets'].items.enum, [...STASH_PRESETS], 'values.schema.json: migrator.stashPresets is STASH_PRESETS')
  t.same(m['stashes'].items.properties.preset.enum, [...STASH_PRESETS], 'values.schema.json: migrator.stashes[].preset is STASH_PRESETS')
  t.same(m['skipPhases'].items.enum, [...PHASE_NAMES], 'values.schema.json: migrator.skipPhases is PHASE_NAMES')
  t.same(m['crds'].additionalProperties.properties.skipPhases.items.enum, [...PHASE_NAMES], 'and per CRD')
  // The template hardcodes each preset's resources (crd-migrator.stashPresets): the same as PRESETS.
  for (const preset of STASH_PRESETS) {
    for (const values of [{ stashPresets: [preset] }, { stashes: [{ preset }] }]) {
      const cr = rulesOf(migratorClusterRole(await template('p', 'p-ns', { migrator: values })))
      const expected = stashRbac([PRESETS[preset]])
      t.same(cr.slice(cr.length - expected.length), expected, `${preset} (${Object.keys(values)[0]}): the rules of PRESETS['${preset}']`)
      t.equal(cr.length, BASE_RULES.length + expected.length, `${preset}: nothing more`)
    }
  }
  // Every phase, skipped everywhere and per CRD, renders and loads.
  const { text } = configOf(
    t,
    await template('p', 'p-ns', {
      migrator: { skipPhases: [...PHASE_NAMES], crds: { 'widgets.example.com': { skipPhases: [...PHASE_NAMES] } } },
    }),
  )
  const config = await loadRenderedConfig(text)
  t.same(config.migrator.skipPhases, [...PHASE_NAMES])
  t.same(config.migrator.crds['widgets.example.com']?.skipPhases, [...PHASE_NAMES])
})

t.test("migrator.maxParallelCrds reaches the config (default: the migrator's)", async (t) => {
  const defaults = configOf(t, await template('p', 'p-ns', {}))
  t.equal((defaults.raw['migrator'] as Record<string, unknown>)['maxParallelCrds'], 4, 'rendered: the chart default, 4')
  t.equal((await loadRenderedConfig(defaults.text)).migrator.maxParallelCrds, 4, "the migrator's default too")
  const set = await loadRenderedConfig(configOf(t, await template('p', 'p-ns', { migrator: { maxParallelCrds: 12 } })).text)
  t.equal(set.migrator.maxParallelCrds, 12, 'migrator.maxParallelCrds=12: 12 CRDs at once')
})

t.test('the lift-freezes hook: pre-delete, pre-upgrade with migrator.enabled=false, as the migrator, for this release only', async (t) => {
  const hookOf = (manifests: Manifest[]) => manifests.find((m) => m.kind === 'Pod' && m.metadata.name.endsWith('-lift-freezes'))
  const podSpec = (m: Manifest | undefined) =>
    (m as unknown as { spec: { serviceAccountName: string; automountServiceAccountToken: boolean; containers: Array<{ args: string[] }> } })
      ?.spec
  const on = hookOf(await template('lf', 'lf-ns', {}))
  t.equal(on?.metadata.annotations?.['helm.sh/hook'], 'pre-delete', 'helm uninstall runs it before deleting anything')
  t.equal(podSpec(on)?.serviceAccountName, 'lf-crd-migrator', "as the migrator's ServiceAccount (the webhook lets it lift)")
  t.equal(podSpec(on)?.automountServiceAccountToken, true, 'with its token')
  t.same(
    podSpec(on)?.containers[0]?.args,
    ['lift-freezes', '--config', '/etc/crd-migrator/config.yaml', '--owner-prefix', 'lf-crd-migrator-', '--hold-seconds', '300'],
    "the freezes of this release's pods only",
  )
  const off = hookOf(await template('lf', 'lf-ns', { migrator: { enabled: false } }))
  t.equal(off?.metadata.annotations?.['helm.sh/hook'], 'pre-upgrade', 'migrator.enabled=false: before the upgrade removes its RBAC')
  t.equal(hookOf(await template('lf', 'lf-ns', { liftFreezesHook: { enabled: false } })), undefined, 'liftFreezesHook.enabled=false: none')
})

t.test('stash rules are RBAC only with the migrator and rbac.create', async (t) => {
  for (const values of [{ migrator: { enabled: false } }, { rbac: { create: false } }]) {
    const what = JSON.stringify(values)
    const manifests = await template('st', 'st-ns', {
      ...values,
      migrator: { ...values.migrator, stashPresets: ['kubevirt-instancetypes'] },
    })
    t.same(
      ids(manifests.filter((m) => RBAC_KINDS.includes(m.kind))),
      values.rbac ? [] : ['ClusterRole/st-crd-migrator-freeze'],
      `${what}: no RBAC for the ServiceAccount (with rbac.create, people's freeze ClusterRole only)`,
    )
    const { raw } = configOf(t, manifests)
    t.same((raw['migrator'] as Record<string, unknown>)['stashPresets'], ['kubevirt-instancetypes'], `${what}: still in the config`)
  }
})

/** The StorageVersionMigration CRD (`crd`) or StorageState CRD (`state_crd`) of kube-storage-version-migrator's Go module (cached by scripts/build-ksvm.sh). */
function ksvmCrdFile(field: 'crd' | 'state_crd' = 'crd'): string {
  const r = spawnSync('bash', [join(repoRoot, 'scripts', 'build-ksvm.sh')], { encoding: 'utf8' })
  if (r.status !== 0) throw new Error(`scripts/build-ksvm.sh failed (${r.status}): ${r.stderr}`)
  const file = new RegExp(`^${field}=(.+)$`, 'm').exec(r.stdout)?.[1]
  if (!file) throw new Error(`scripts/build-ksvm.sh printed no ${field}=<path>: ${r.stdout}`)
  return file
}

/** The one YAML document of a file, as plain data. */
async function yamlDocument(file: string): Promise<Manifest> {
  const docs = parseAllDocuments(await readFile(file, 'utf8'))
    .map((d) => d.toJS() as Manifest | null)
    .filter((m): m is Manifest => m !== null)
  if (docs.length !== 1) throw new Error(`${file}: expected one YAML document, got ${docs.length}`)
  return docs[0]!
}

t.test("the chart's StorageVersionMigration CRD is kube-storage-version-migrator's, unchanged", async (t) => {
  const module = await yamlDocument(ksvmCrdFile())
  const copy = await yamlDocument(join(chartDir, 'files', `${SVM_CRD}.yaml`))
  t.same(copy, module, `charts/crd-migrator/files/${SVM_CRD}.yaml equals the Go module's manifests/storage_migration_crd.yaml`)
  t.equal(module.metadata.name, SVM_CRD)
  t.match(module['spec'], { group: 'migration.k8s.io', scope: 'Cluster', names: { kind: 'StorageVersionMigration' } })

  const ns = uniqueName('chart')
  const rendered = one(await template('crd', ns, { storageVersionMigrations: { enabled: true } }), 'CustomResourceDefinition')
  t.same(rendered['spec'], module['spec'], "the rendered CRD's spec deep-equals the module's")
  t.same(
    { ...rendered, metadata: undefined },
    { ...module, metadata: undefined },
    'and so does everything outside metadata (apiVersion, kind, spec)',
  )
  t.equal(rendered.metadata.name, SVM_CRD)
  t.notOk(rendered.metadata.namespace, 'cluster-scoped')
  t.same(
    rendered.metadata.annotations,
    { ...module.metadata.annotations, 'helm.sh/resource-policy': 'keep' },
    "the module's annotations (api-approved.kubernetes.io) plus keep",
  )
  t.same(
    rendered.metadata.labels,
    {
      'app.kubernetes.io/name': 'crd-migrator',
      'app.kubernetes.io/component': 'crd',
      'helm.sh/chart': 'crd-migrator-0.1.0',
      'app.kubernetes.io/instance': 'crd',
      'app.kubernetes.io/version': '0.1.0',
      'app.kubernetes.io/part-of': 'crd-migrator',
      'app.kubernetes.io/managed-by': 'Helm',
    },
    "the chart's labels",
  )
  t.same(Object.keys(rendered.metadata).sort(), ['annotations', 'labels', 'name'])
})

t.test('the StorageVersionMigration CRD renders only with storageVersionMigrations.enabled and .installCRD', async (t) => {
  const cases: Array<[string, Record<string, unknown>, { crd: boolean; rules: boolean; config: boolean }]> = [
    ['defaults', {}, { crd: false, rules: false, config: false }],
    ['installCRD alone', { storageVersionMigrations: { installCRD: true } }, { crd: false, rules: false, config: false }],
    ['enabled (installCRD defaults to true)', { storageVersionMigrations: { enabled: true } }, { crd: true, rules: true, config: true }],
    [
      'enabled, installCRD=false (the CRD is installed already)',
      { storageVersionMigrations: { enabled: true, installCRD: false } },
      { crd: false, rules: true, config: true },
    ],
    [
      'enabled, migrator.enabled=false (webhook only: no RBAC)',
      { storageVersionMigrations: { enabled: true }, migrator: { enabled: false } },
      { crd: true, rules: false, config: true },
    ],
    [
      'enabled, rbac.create=false (bring your own RBAC)',
      { storageVersionMigrations: { enabled: true }, rbac: { create: false } },
      { crd: true, rules: false, config: true },
    ],
  ]
  for (const [what, values, expected] of cases) {
    const manifests = await template('svm', 'svm-ns', values)
    t.same(
      ids(manifests.filter((m) => m.kind === 'CustomResourceDefinition')),
      expected.crd ? [`CustomResourceDefinition/${SVM_CRD}`] : [],
      `${what}: CRD ${expected.crd ? 'rendered' : 'not rendered'}`,
    )
    const clusterRole = manifests.find(
      (m) => m.kind === 'ClusterRole' && !['consent', 'freeze'].includes(m.metadata.labels?.['app.kubernetes.io/component'] ?? ''),
    )
    const svmRules = clusterRole ? rulesOf(clusterRole).filter((r) => r.apiGroups?.includes('migration.k8s.io')) : []
    t.same(svmRules, expected.rules ? SVM_RULES : [], `${what}: StorageVersionMigration rules ${expected.rules ? 'exactly' : 'none'}`)
    if (!migratorEnabled(values) || (values['rbac'] as { create?: boolean } | undefined)?.create === false)
      t.same(
        ids(manifests.filter((m) => RBAC_KINDS.includes(m.kind) && m.metadata.labels?.['app.kubernetes.io/component'] !== 'freeze')),
        [],
        `${what}: no RBAC for the ServiceAccount`,
      )
    const { raw } = configOf(t, manifests)
    const migrator = raw['migrator'] as Record<string, unknown>
    t.equal(migrator['storageVersionMigrations'], expected.config ? true : undefined, `${what}: config migrator.storageVersionMigrations`)
    t.equal(
      migrator['storageVersionMigrationsUnmanaged'],
      expected.config ? 'rewrite' : undefined,
      `${what}: config migrator.storageVersionMigrationsUnmanaged (default rewrite)`,
    )
  }
  const refusing = configOf(t, await template('svm', 'svm-ns', { storageVersionMigrations: { enabled: true, unmanaged: 'refuse' } }))
  t.equal((refusing.raw['migrator'] as Record<string, unknown>)['storageVersionMigrationsUnmanaged'], 'refuse', 'unmanaged: refuse')
  t.equal((await loadRenderedConfig(refusing.text)).migrator.storageVersionMigrationsUnmanaged, 'refuse', 'and the server reads it')
  // builtInResources alone (e.g. a StorageVersionMigration someone else reconciles): the rules, nothing of KSVM.
  const manifests = await template('svm', 'svm-ns', { migrator: { builtInResources: [{ group: 'batch', resource: 'cronjobs' }] } })
  t.same(
    rulesOf(migratorClusterRole(manifests)).slice(BASE_RULES.length),
    [{ apiGroups: ['batch'], resources: ['cronjobs'], verbs: ['get', 'list', 'patch'] }],
    'builtInResources alone: exactly its rule',
  )
  t.same(ids(manifests.filter((m) => m.kind === 'CustomResourceDefinition')), [])
})

const STATE_CRD = 'storagestates.migration.k8s.io'
/** The ClusterRole rules storageVersionMigrations.trigger.enabled adds, after those of enabled. */
const TRIGGER_RULES = [
  { apiGroups: ['migration.k8s.io'], resources: ['storagestates'], verbs: ['get', 'list', 'create', 'delete'] },
  { apiGroups: ['migration.k8s.io'], resources: ['storagestates/status'], verbs: ['update'] },
  { apiGroups: ['migration.k8s.io'], resources: ['storageversionmigrations'], verbs: ['get', 'list', 'watch', 'create', 'delete'] },
]

t.test("the chart's StorageState CRD is kube-storage-version-migrator's, unchanged, and renders with the trigger", async (t) => {
  const module = await yamlDocument(ksvmCrdFile('state_crd'))
  const copy = await yamlDocument(join(chartDir, 'files', `${STATE_CRD}.yaml`))
  t.same(copy, module, `charts/crd-migrator/files/${STATE_CRD}.yaml equals the Go module's manifests/storage_state_crd.yaml`)
  t.match(module['spec'], { group: 'migration.k8s.io', scope: 'Cluster', names: { kind: 'StorageState' } })
  const rendered = (await template('trig', 'trig-ns', { storageVersionMigrations: { trigger: { enabled: true } } })).find(
    (m) => m.kind === 'CustomResourceDefinition' && m.metadata.name === STATE_CRD,
  )
  t.same({ ...rendered, metadata: undefined }, { ...module, metadata: undefined }, "rendered: the module's, outside metadata")
  t.equal(rendered?.metadata.annotations?.['helm.sh/resource-policy'], 'keep', 'kept on uninstall')

  const cases: Array<[string, Record<string, unknown>, { crds: string[]; rules: unknown[]; config: unknown }]> = [
    ['defaults', {}, { crds: [], rules: [], config: undefined }],
    [
      'trigger alone: both CRDs (it creates StorageVersionMigrations), its rules, its config',
      { storageVersionMigrations: { trigger: { enabled: true, pollSeconds: 30 } } },
      { crds: [STATE_CRD, SVM_CRD], rules: TRIGGER_RULES, config: { enabled: true, pollSeconds: 30 } },
    ],
    [
      'trigger and enabled: both rule sets',
      { storageVersionMigrations: { enabled: true, trigger: { enabled: true } } },
      { crds: [STATE_CRD, SVM_CRD], rules: [...SVM_RULES, ...TRIGGER_RULES], config: { enabled: true, pollSeconds: 600 } },
    ],
    [
      'trigger, installCRD=false',
      { storageVersionMigrations: { installCRD: false, trigger: { enabled: true } } },
      { crds: [], rules: TRIGGER_RULES, config: { enabled: true, pollSeconds: 600 } },
    ],
  ]
  for (const [what, values, expected] of cases) {
    const manifests = await template('trig', 'trig-ns', values)
    t.same(
      ids(manifests.filter((m) => m.kind === 'CustomResourceDefinition')).sort(),
      expected.crds.map((c) => `CustomResourceDefinition/${c}`).sort(),
      `${what}: CRDs`,
    )
    const rules = rulesOf(migratorClusterRole(manifests)).filter((r) => r.apiGroups?.includes('migration.k8s.io'))
    t.same(rules, expected.rules, `${what}: rules on migration.k8s.io`)
    const { raw } = configOf(t, manifests)
    t.same((raw['migrator'] as Record<string, unknown>)['ksvmTrigger'], expected.config, `${what}: config migrator.ksvmTrigger`)
  }
})

t.test('bad values are refused with a message', async (t) => {
  const cases: Array<[string, object, RegExp]> = [
    ['no cert-manager, no Secret', { certManager: { enabled: false }, webhook: { caBundle: 'eA==' } }, /tls\.existingSecret is required/],
    ['no cert-manager, no caBundle', { certManager: { enabled: false }, tls: { existingSecret: 's' } }, /webhook\.caBundle .*is required/],
    [
      'annotation key that would break the CEL literal',
      { annotations: { migrating: "x' || true || 'y" } },
      /not a Kubernetes annotation key/,
    ],
    [
      'several replicas without leader election',
      { leaderElection: { enabled: false } },
      /leaderElection\.enabled=false needs replicaCount=1/,
    ],
    ['probes need the metrics port (values.schema.json)', { metrics: { port: 0 } }, /\/metrics\/port/],
    ['metrics and webhook on one port', { metrics: { port: 9443 } }, /metrics\.port and webhook\.port must differ/],
    ['a misspelt value (values.schema.json)', { replicas: 3 }, /additional properties 'replicas' not allowed/],
    ['an unknown phase (values.schema.json)', { migrator: { crds: { 'a.example.com': { skipPhases: ['Nope'] } } } }, /skipPhases/],
    ['CRD names are plural.group', { migrator: { names: ['widgets'] } }, /must be <plural>\.<group>/],
    ['no CRD at a time (values.schema.json)', { migrator: { maxParallelCrds: 0 } }, /maxParallelCrds/],
    // extraConfig cannot make the config file disagree with the webhook configuration, the RBAC or the mounts.
    [
      'extraConfig moves the freeze annotation',
      { extraConfig: { annotations: { migrating: 'example.com/other' } } },
      /extraConfig\.annotations\.migrating may not be set: set the chart value annotations\.migrating instead/,
    ],
    [
      'extraConfig with an empty annotations map',
      { extraConfig: { annotations: {} } },
      /extraConfig\.annotations\.migrating may not be set/,
    ],
    [
      'extraConfig adds a migrator user',
      { extraConfig: { identities: { migratorUsers: ['mallory'] } } },
      /extraConfig\.identities\.migratorUsers may not be set: set the chart value identities\.migratorUsers instead/,
    ],
    [
      'extraConfig adds a migrator group',
      { extraConfig: { identities: { migratorGroups: ['devs'] } } },
      /extraConfig\.identities\.migratorGroups may not be set: set the chart value identities\.migratorGroups instead/,
    ],
    [
      'extraConfig changes the break-glass groups',
      { extraConfig: { identities: { breakGlassGroups: ['devs'] } } },
      /extraConfig\.identities\.breakGlassGroups may not be set: set the chart value identities\.breakGlassGroups instead/,
    ],
    [
      "extraConfig turns the migrator on behind the chart's back",
      { migrator: { enabled: false }, extraConfig: { migrator: { enabled: true } } },
      /extraConfig\.migrator\.enabled may not be set: set the chart value migrator\.enabled instead/,
    ],
    [
      'extraConfig points the state key elsewhere',
      { extraConfig: { migrator: { stateKeyFile: '/tmp/key' } } },
      /extraConfig\.migrator\.stateKeyFile may not be set: set the chart value migrator\.stateKey\.existingSecret instead/,
    ],
    // RBAC outside custom resources.
    [
      '"*" in rbac.managedGroups (values.schema.json)',
      { rbac: { managedGroups: ['example.com', '*'] } },
      /at '\/rbac\/managedGroups\/1': '\*' does not match pattern/,
    ],
    [
      'the core group in rbac.managedGroups (values.schema.json)',
      { rbac: { managedGroups: [''] } },
      /at '\/rbac\/managedGroups\/0': minLength/,
    ],
    [
      'apps in rbac.managedGroups',
      { rbac: { managedGroups: ['apps'] } },
      /rbac\.managedGroups: "apps" is an API group kube-apiserver serves itself, where no CRD lives; list the groups of your CRDs/,
    ],
    [
      'admissionregistration.k8s.io in rbac.managedGroups',
      { rbac: { managedGroups: ['example.com', 'admissionregistration.k8s.io'] } },
      /rbac\.managedGroups: "admissionregistration\.k8s\.io" is an API group kube-apiserver serves itself/,
    ],
    [
      'a webhook configuration in migrator.names',
      { migrator: { names: ['validatingwebhookconfigurations.admissionregistration.k8s.io'] } },
      /migrator\.names \/ migrator\.crds \(validatingwebhookconfigurations\.admissionregistration\.k8s\.io\): "admissionregistration\.k8s\.io" is an API group kube-apiserver serves itself/,
    ],
    [
      'Deployments in migrator.crds',
      { migrator: { crds: { 'deployments.apps': { concurrency: 1 } } } },
      /\(deployments\.apps\): "apps" is an API group kube-apiserver serves itself/,
    ],
    [
      'every group through migrator.crds',
      { migrator: { crds: { 'widgets.*': {} } } },
      /\(widgets\.\*\): "\*" would grant get\/list\/patch on every API group/,
    ],
    // Built-in resources: one named resource per entry, nothing wider.
    [
      '"*" as a built-in group (values.schema.json)',
      { migrator: { builtInResources: [{ group: '*', resource: 'secrets' }] } },
      /at '\/migrator\/builtInResources\/0\/group': '\*' does not match pattern/,
    ],
    [
      '"*" as a built-in resource (values.schema.json)',
      {
        migrator: {
          builtInResources: [
            { group: '', resource: 'secrets' },
            { group: '', resource: '*' },
          ],
        },
      },
      /at '\/migrator\/builtInResources\/1\/resource': '\*' does not match pattern/,
    ],
    [
      'a built-in resource with a wildcard in it (values.schema.json)',
      { migrator: { builtInResources: [{ group: 'apps', resource: 'deploy*' }] } },
      /at '\/migrator\/builtInResources\/0\/resource': 'deploy\*' does not match pattern/,
    ],
    [
      'an empty built-in resource (values.schema.json)',
      { migrator: { builtInResources: [{ group: '', resource: '' }] } },
      /at '\/migrator\/builtInResources\/0\/resource': minLength/,
    ],
    [
      'a built-in resource without its group (values.schema.json)',
      { migrator: { builtInResources: [{ resource: 'secrets' }] } },
      /at '\/migrator\/builtInResources\/0': missing property 'group'/,
    ],
    [
      'a non-string built-in group (values.schema.json)',
      { migrator: { builtInResources: [{ group: null, resource: 'secrets' }] } },
      /at '\/migrator\/builtInResources\/0\/group': got null, want string/,
    ],
    [
      'a built-in subresource (values.schema.json)',
      { migrator: { builtInResources: [{ group: 'apps', resource: 'deployments/scale' }] } },
      /at '\/migrator\/builtInResources\/0\/resource': 'deployments\/scale' does not match pattern/,
    ],
    [
      'verbs on a built-in resource (values.schema.json)',
      { migrator: { builtInResources: [{ group: '', resource: 'secrets', verbs: ['delete'] }] } },
      /at '\/migrator\/builtInResources\/0': additional properties 'verbs' not allowed/,
    ],
    [
      'a built-in resource as a string (values.schema.json)',
      { migrator: { builtInResources: ['secrets'] } },
      /at '\/migrator\/builtInResources\/0': got string, want object/,
    ],
    [
      'a misspelt storageVersionMigrations value (values.schema.json)',
      { storageVersionMigrations: { enabled: true, installCrd: false } },
      /additional properties 'installCrd' not allowed/,
    ],
    [
      'an unknown storageVersionMigrations.unmanaged (values.schema.json)',
      { storageVersionMigrations: { enabled: true, unmanaged: 'freeze' } },
      /at '\/storageVersionMigrations\/unmanaged': value must be one of 'rewrite', 'refuse'/,
    ],
    [
      "extraConfig reconciles StorageVersionMigrations behind the chart's back",
      { extraConfig: { migrator: { storageVersionMigrations: true } } },
      /extraConfig\.migrator\.storageVersionMigrations may not be set: set the chart value storageVersionMigrations\.enabled instead/,
    ],
    [
      "extraConfig runs the trigger behind the chart's back",
      { extraConfig: { migrator: { ksvmTrigger: { enabled: true } } } },
      /extraConfig\.migrator\.ksvmTrigger may not be set: set the chart values storageVersionMigrations\.trigger\.enabled/,
    ],
    [
      'a trigger poll under a second (values.schema.json)',
      { storageVersionMigrations: { trigger: { enabled: true, pollSeconds: 0 } } },
      /pollSeconds/,
    ],
    // Stash rules: shaped like the config's StashRuleSchema, strictly, and granting one named resource each.
    [
      'an unknown stash preset (values.schema.json)',
      { migrator: { stashPresets: ['kubevirt'] } },
      /at '\/migrator\/stashPresets\/0': value must be 'kubevirt-instancetypes'/,
    ],
    [
      'an unknown preset in a stash rule (values.schema.json)',
      { migrator: { stashes: [{ preset: 'kubevirt' }] } },
      /at '\/migrator\/stashes\/0\/preset': value must be 'kubevirt-instancetypes'/,
    ],
    [
      'a stash rule with neither a preset nor group, source and referrers (values.schema.json)',
      { migrator: { stashes: [{ group: 'example.com', source: EXPLICIT_STASH_RULE.source }] } },
      /at '\/migrator\/stashes\/0': 'anyOf' failed[\s\S]*missing property 'preset'[\s\S]*missing property 'referrers'/,
    ],
    [
      'a referrer pointer not starting with / (values.schema.json)',
      {
        migrator: {
          stashes: [
            {
              ...EXPLICIT_STASH_RULE,
              referrers: [{ group: 'example.com', version: 'v1', resource: 'owners', pointers: ['spec/revisionName'] }],
            },
          ],
        },
      },
      /at '\/migrator\/stashes\/0\/referrers\/0\/pointers\/0': 'spec\/revisionName' does not match pattern/,
    ],
    [
      'a dataPointer not starting with / (values.schema.json)',
      { migrator: { stashes: [{ ...EXPLICIT_STASH_RULE, source: { ...EXPLICIT_STASH_RULE.source, dataPointer: 'data' } }] } },
      /at '\/migrator\/stashes\/0\/source\/dataPointer': 'data' does not match pattern/,
    ],
    [
      'a referrer without pointers (values.schema.json)',
      {
        migrator: {
          stashes: [{ ...EXPLICIT_STASH_RULE, referrers: [{ group: 'example.com', version: 'v1', resource: 'owners', pointers: [] }] }],
        },
      },
      /at '\/migrator\/stashes\/0\/referrers\/0\/pointers': minItems/,
    ],
    [
      'no referrers (values.schema.json)',
      { migrator: { stashes: [{ ...EXPLICIT_STASH_RULE, referrers: [] }] } },
      /at '\/migrator\/stashes\/0\/referrers': minItems/,
    ],
    [
      'a stash source without its version (values.schema.json)',
      { migrator: { stashes: [{ preset: 'kubevirt-instancetypes', source: { group: 'apps', resource: 'controllerrevisions' } }] } },
      /at '\/migrator\/stashes\/0\/source': missing property 'version'/,
    ],
    [
      '"*" as a stash source (values.schema.json)',
      { migrator: { stashes: [{ ...EXPLICIT_STASH_RULE, source: { group: 'apps', version: 'v1', resource: '*' } }] } },
      /at '\/migrator\/stashes\/0\/source\/resource': '\*' does not match pattern/,
    ],
    [
      '"*" as a referrer group (values.schema.json)',
      {
        migrator: {
          stashes: [
            { ...EXPLICIT_STASH_RULE, referrers: [{ group: '*', version: 'v1', resource: 'owners', pointers: ['/spec/revisionName'] }] },
          ],
        },
      },
      /at '\/migrator\/stashes\/0\/referrers\/0\/group': '\*' does not match pattern/,
    ],
    [
      'a referrer subresource (values.schema.json)',
      {
        migrator: {
          stashes: [
            {
              ...EXPLICIT_STASH_RULE,
              referrers: [{ group: 'kubevirt.io', version: 'v1', resource: 'virtualmachines/status', pointers: ['/spec/revisionName'] }],
            },
          ],
        },
      },
      /at '\/migrator\/stashes\/0\/referrers\/0\/resource': 'virtualmachines\/status' does not match pattern/,
    ],
    [
      'verbs in a stash rule (values.schema.json)',
      { migrator: { stashes: [{ preset: 'kubevirt-instancetypes', verbs: ['update'] }] } },
      /at '\/migrator\/stashes\/0': additional properties 'verbs' not allowed/,
    ],
    [
      'a misspelt stash source field (values.schema.json)',
      { migrator: { stashes: [{ ...EXPLICIT_STASH_RULE, source: { ...EXPLICIT_STASH_RULE.source, namespace: 'team-a' } }] } },
      /at '\/migrator\/stashes\/0\/source': additional properties 'namespace' not allowed/,
    ],
    [
      'an unknown phase to skip (values.schema.json)',
      { migrator: { skipPhases: ['StashedObjectMigrations'] } },
      /at '\/migrator\/skipPhases\/0': value must be one of 'StorageVersionMigration', 'StashedObjectMigration', 'CleanupManagedFields'/,
    ],
    [
      "extraConfig adds stash presets behind the chart's back",
      { extraConfig: { migrator: { stashPresets: ['kubevirt-instancetypes'] } } },
      /extraConfig\.migrator\.stashPresets may not be set: set the chart value migrator\.stashPresets instead/,
    ],
    [
      "extraConfig adds stash rules behind the chart's back",
      { extraConfig: { migrator: { stashes: [] } } },
      /extraConfig\.migrator\.stashes may not be set: set the chart value migrator\.stashes instead/,
    ],
    // The operators' options (issue #18).
    [
      'a NetworkPolicy without the API server as a source',
      { networkPolicy: { enabled: true } },
      /networkPolicy\.enabled needs networkPolicy\.apiServerCIDRs or networkPolicy\.apiServerPeers: the API server calls the webhook from there/,
    ],
    [
      'a NetworkPolicy that would keep the ServiceMonitor out',
      { networkPolicy: { enabled: true, apiServerCIDRs: ['10.0.0.0/8'] }, metrics: { serviceMonitor: { enabled: true } } },
      /networkPolicy \(enabled, or apiServerCIDRs\/apiServerPeers set\) with metrics\.serviceMonitor\.enabled needs networkPolicy\.metricsFrom/,
    ],
    [
      'a NetworkPolicy for pods on the host network',
      { hostNetwork: true, networkPolicy: { enabled: true, apiServerCIDRs: ['10.0.0.0/8'] } },
      /networkPolicy\.enabled does nothing with hostNetwork=true/,
    ],
    [
      'no API server port to reach (values.schema.json)',
      { networkPolicy: { enabled: true, apiServerCIDRs: ['10.0.0.0/8'], egress: { enabled: true, apiServerPorts: [] } } },
      /at '\/networkPolicy\/egress\/apiServerPorts': minItems/,
    ],
    [
      "the dashboard's sidecar label as one of the chart's",
      { grafanaDashboard: { enabled: true, sidecarLabel: 'app.kubernetes.io/name' } },
      /grafanaDashboard\.sidecarLabel: "app\.kubernetes\.io\/name" is one of the chart's own labels/,
    ],
    [
      'a dashboard namespace that is no namespace name (values.schema.json)',
      { grafanaDashboard: { enabled: true, namespace: 'Grafana Dashboards' } },
      /at '\/grafanaDashboard\/namespace': 'Grafana Dashboards' does not match pattern/,
    ],
    [
      'a CRD frozen for 0 minutes (values.schema.json)',
      { prometheusRule: { frozenCrdMinutes: 0 } },
      /at '\/prometheusRule\/frozenCrdMinutes': minimum/,
    ],
    ['a misspelt tests value (values.schema.json)', { tests: { enable: true } }, /additional properties 'enable' not allowed/],
  ]
  for (const [what, values, message] of cases) {
    const r = await helm(['template', 'x', chartDir, ...(await valuesArgs(values))])
    t.not(r.code, 0, `${what}: helm template fails`)
    t.match(r.stderr, message, what)
  }
})

t.test('the template refuses the groups on its own, "*" and "" included (helm template --skip-schema-validation)', async (t) => {
  const cases: Array<[string, RegExp]> = [
    ['*', /rbac\.managedGroups: "\*" would grant get\/list\/patch on every API group, Secrets and RBAC included; .*rbac\.allGroups=true/],
    ['', /rbac\.managedGroups: "" is the core API group/],
    ['apps', /rbac\.managedGroups: "apps" is an API group kube-apiserver serves itself, where no CRD lives/],
    ['rbac.authorization.k8s.io', /rbac\.managedGroups: "rbac\.authorization\.k8s\.io" is an API group kube-apiserver serves itself/],
  ]
  for (const [group, message] of cases) {
    const r = await helm([
      'template',
      'x',
      chartDir,
      '--skip-schema-validation',
      ...(await valuesArgs({ rbac: { managedGroups: ['example.com', group] } })),
    ])
    t.not(r.code, 0, `${JSON.stringify(group)}: helm template fails`)
    t.match(r.stderr, message, JSON.stringify(group))
  }
  // migrator.builtInResources, entry by entry.
  const builtIn: Array<[string, unknown, RegExp]> = [
    [
      '"*" group',
      { group: '*', resource: 'secrets' },
      /migrator\.builtInResources\[1\]: "\*" would grant get\/list\/patch on more than one resource/,
    ],
    [
      '"*" resource',
      { group: '', resource: '*' },
      /migrator\.builtInResources\[1\]: "\*" would grant get\/list\/patch on more than one resource/,
    ],
    ['a wildcard in the resource', { group: 'apps', resource: 'deploy*' }, /migrator\.builtInResources\[1\]: "\*" would grant/],
    ['no resource', { group: '' }, /migrator\.builtInResources\[1\]\.resource must name one resource/],
    ['an empty resource', { group: '', resource: '' }, /migrator\.builtInResources\[1\]\.resource must name one resource/],
    ['no group', { resource: 'secrets' }, /migrator\.builtInResources\[1\]\.group must be a string: the API group, "" for the core group/],
    [
      'a subresource',
      { group: 'apps', resource: 'deployments/scale' },
      /migrator\.builtInResources\[1\]\.resource: "deployments\/scale" is a subresource/,
    ],
    ['a string', 'secrets', /migrator\.builtInResources\[1\] must be \{group, resource\}/],
  ]
  for (const [what, entry, message] of builtIn) {
    for (const enabled of [true, false]) {
      const r = await helm([
        'template',
        'x',
        chartDir,
        '--skip-schema-validation',
        ...(await valuesArgs({ migrator: { enabled, builtInResources: [{ group: '', resource: 'secrets' }, entry] } })),
      ])
      t.not(r.code, 0, `builtInResources, ${what} (migrator.enabled=${enabled}): helm template fails`)
      t.match(r.stderr, message, `builtInResources, ${what} (migrator.enabled=${enabled})`)
    }
  }
  // Stash rules, rule by rule; a preset stands for its resources.
  const stash: Array<[string, Record<string, unknown>, RegExp]> = [
    [
      'an unknown preset',
      { stashPresets: ['kubevirt'] },
      /migrator\.stashPresets\[0\]: kubevirt is not a stash preset \(known: kubevirt-instancetypes\)/,
    ],
    ['an unknown preset in a rule', { stashes: [{ preset: 'nope' }] }, /migrator\.stashes\[0\]\.preset: nope is not a stash preset/],
    [
      'a rule with neither a preset nor referrers',
      { stashes: [{ group: 'example.com', source: EXPLICIT_STASH_RULE.source }] },
      /migrator\.stashes\[0\]: a stash rule needs a preset, or group, source and referrers/,
    ],
    ['a rule as a string', { stashes: ['kubevirt-instancetypes'] }, /migrator\.stashes\[0\] must be a stash rule/],
    [
      '"*" as a source resource',
      { stashes: [{ preset: 'kubevirt-instancetypes', source: { group: 'apps', version: 'v1', resource: '*' } }] },
      /migrator\.stashes\[0\]\.source: "\*" would grant more than one resource/,
    ],
    [
      '"*" as a referrer group',
      { stashes: [{ preset: 'kubevirt-instancetypes', referrers: [{ group: '*', version: 'v1', resource: 'x', pointers: ['/a'] }] }] },
      /migrator\.stashes\[0\]\.referrers\[0\]: "\*" would grant more than one resource/,
    ],
    [
      'a referrer subresource',
      {
        stashes: [
          {
            preset: 'kubevirt-instancetypes',
            referrers: [{ group: 'kubevirt.io', version: 'v1', resource: 'virtualmachines/status', pointers: ['/a'] }],
          },
        ],
      },
      /migrator\.stashes\[0\]\.referrers\[0\]\.resource: "virtualmachines\/status" is a subresource/,
    ],
    [
      'a source without its group',
      { stashes: [{ preset: 'kubevirt-instancetypes', source: { version: 'v1', resource: 'controllerrevisions' } }] },
      /migrator\.stashes\[0\]\.source\.group must be a string/,
    ],
    [
      'referrers not a list',
      { stashes: [{ preset: 'kubevirt-instancetypes', referrers: 'virtualmachines' }] },
      /migrator\.stashes\[0\]\.referrers must be a list/,
    ],
  ]
  for (const [what, migrator, message] of stash) {
    for (const enabled of [true, false]) {
      const r = await helm([
        'template',
        'x',
        chartDir,
        '--skip-schema-validation',
        ...(await valuesArgs({ migrator: { enabled, ...migrator } })),
      ])
      t.not(r.code, 0, `stash rules, ${what} (migrator.enabled=${enabled}): helm template fails`)
      t.match(r.stderr, message, `stash rules, ${what} (migrator.enabled=${enabled})`)
    }
  }
  // Webhook only renders no RBAC, but the values are still checked.
  const r = await helm([
    'template',
    'x',
    chartDir,
    '--skip-schema-validation',
    ...(await valuesArgs({ migrator: { enabled: false }, rbac: { managedGroups: ['policy'] } })),
  ])
  t.match(r.stderr, /"policy" is an API group kube-apiserver serves itself/, 'checked with migrator.enabled=false too')
})

t.test('every API group kube-apiserver serves is refused; CRD groups under k8s.io are not', async (t) => {
  // The chart's list (the crd-migrator.builtinApiGroups helper).
  const helpers = await readFile(join(chartDir, 'templates', '_helpers.tpl'), 'utf8')
  const block = /define "crd-migrator\.builtinApiGroups"[\s\S]*?\{\{- list([\s\S]*?)\| toJson/.exec(helpers)
  t.ok(block, 'the crd-migrator.builtinApiGroups helper')
  const inTemplate = [...(block?.[1] ?? '').matchAll(/"([^"]+)"/g)].map((m) => m[1]!).sort()
  t.ok(inTemplate.length >= 20, `${inTemplate.length} groups`)

  // What this kube-apiserver serves itself: the APIServices the aggregator registers at
  // start (label automanaged=onstart); CRD groups are synced later (automanaged=true).
  const res = await cp.apiRequest(
    '/apis/apiregistration.k8s.io/v1/apiservices?labelSelector=kube-aggregator.kubernetes.io/automanaged%3Donstart',
  )
  t.equal(res.status, 200)
  const served = [...new Set((res.json as { items: Array<{ spec: { group?: string } }> }).items.map((a) => a.spec.group ?? ''))]
  // The aggregator's own group has no such APIService; /apis lists it.
  const apis = await cp.apiRequest('/apis')
  const groups = (apis.json as { groups: Array<{ name: string }> }).groups.map((g) => g.name)
  t.ok(groups.includes('apiregistration.k8s.io'), '/apis lists apiregistration.k8s.io')
  served.push('apiregistration.k8s.io')
  served.sort()
  t.ok(
    served.includes('apps') && served.includes('apiextensions.k8s.io') && served.includes('rbac.authorization.k8s.io'),
    `built-in groups found: ${served.join(', ')}`,
  )
  // The default control plane is v1.37; CRD_MIGRATOR_KUBE_VERSION=v1.35.4 runs this on the oldest we support.
  const version = ((await cp.apiRequest('/version')).json as { gitVersion: string }).gitVersion
  t.same(
    served.filter((g) => g !== '' && !inTemplate.includes(g)),
    [],
    `the chart knows every group kube-apiserver ${version} serves (the list covers v1.35 to v1.37)`,
  )
  for (const group of new Set([...served, ...inTemplate])) {
    const r = await helm(['template', 'x', chartDir, ...(await valuesArgs({ rbac: { managedGroups: [group] } }))])
    t.not(r.code, 0, `rbac.managedGroups=[${JSON.stringify(group)}] is refused`)
    if (group !== '') t.match(r.stderr, `"${group}" is an API group kube-apiserver serves itself`)
  }

  const crdGroups = ['gateway.networking.k8s.io', 'snapshot.storage.k8s.io', 'cluster.x-k8s.io', 'policy.networking.k8s.io', 'example.com']
  const r = await helm([
    'template',
    'x',
    chartDir,
    ...(await valuesArgs({
      rbac: { managedGroups: crdGroups },
      migrator: {
        names: ['httproutes.gateway.networking.k8s.io'],
        crds: { 'volumesnapshots.snapshot.storage.k8s.io': { useStatusSubresource: true } },
      },
    })),
  ])
  t.equal(r.code, 0, 'CRD groups under k8s.io and x-k8s.io are allowed', { stderr: r.stderr })
})

t.test('values.yaml: every value is commented (on itself or on the block it belongs to)', async (t) => {
  const lines = (await readFile(join(chartDir, 'values.yaml'), 'utf8')).split('\n')
  const stack: Array<{ indent: number; documented: boolean }> = []
  const undocumented: string[] = []
  const path: string[] = []
  for (let i = 0; i < lines.length; i++) {
    const m = /^(\s*)([A-Za-z][\w.-]*):(.*)$/.exec(lines[i]!)
    if (!m) continue
    const indent = m[1]!.length
    while (stack.length > 0 && stack.at(-1)!.indent >= indent) {
      stack.pop()
      path.pop()
    }
    // The comment block right above this key, if any, must hold a `# --` description.
    let j = i - 1
    let described = false
    while (j >= 0 && /^\s*#/.test(lines[j]!)) {
      if (/^\s*# -- \S/.test(lines[j]!)) described = true
      j--
    }
    const documented = described || (stack.at(-1)?.documented ?? false)
    path.push(m[2]!)
    const next = lines.slice(i + 1).find((l) => l.trim() && !/^\s*#/.test(l))
    const leaf = m[3]!.trim() !== '' || !next || next.length - next.trimStart().length <= indent
    if (leaf && !documented) undocumented.push(path.join('.'))
    stack.push({ indent, documented })
  }
  t.same(undocumented, [], 'values without a `# --` description')
})
