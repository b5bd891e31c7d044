/**
 * The RBAC of the chart's renders, created for real on the API server and probed with
 * SubjectAccessReviews: what the migrator does is allowed, nothing else; the rules of
 * storageVersionMigrations, builtInResources and the stash rules grant exactly what they
 * name. Shared setup: test/helpers/chart.ts.
 */
import t from 'tap'
import { uniqueName } from '../helpers/controlplane.js'
import { createNamespace, createRbacOf, one, rulesOf, template, migratorClusterRole } from '../helpers/chart.js'
import { BASE_RULES, scenarios } from '../helpers/chart-scenarios.js'

t.test('RBAC, created for real, allows what the migrator does and nothing else', async (t) => {
  const ns = uniqueName('chart-rbac')
  await createNamespace(ns)
  const release = uniqueName('rb')
  const manifests = await template(release, ns, scenarios[1]!.values)
  const can = await createRbacOf(t, manifests, ns)
  const lease = one(manifests, 'Deployment').metadata.name
  const crds = { group: 'apiextensions.k8s.io', resource: 'customresourcedefinitions' }
  const allowed: Array<[string, Record<string, string>]> = [
    ['watch CRDs', { ...crds, verb: 'watch' }],
    ['patch a CRD', { ...crds, verb: 'patch', name: 'widgets.example.com' }],
    ['patch CRD status', { ...crds, verb: 'patch', subresource: 'status', name: 'widgets.example.com' }],
    ['list widgets in all namespaces', { group: 'example.com', resource: 'widgets', verb: 'list' }],
    ['get a widget', { group: 'example.com', resource: 'widgets', verb: 'get', namespace: 'team-a', name: 'w' }],
    [
      'patch widget status',
      { group: 'example.com', resource: 'widgets', subresource: 'status', verb: 'patch', namespace: 'team-a', name: 'w' },
    ],
    ['patch a resource of a managed group', { group: 'stable.example.org', resource: 'things', verb: 'patch', namespace: 'x', name: 'y' }],
    ['patch a gadget (by name)', { group: 'example.net', resource: 'gadgets', verb: 'patch', name: 'g' }],
    [
      'patch an HTTPRoute (a CRD group under k8s.io)',
      { group: 'gateway.networking.k8s.io', resource: 'httproutes', verb: 'patch', namespace: 'x', name: 'r' },
    ],
    ['create its Lease', { group: 'coordination.k8s.io', resource: 'leases', verb: 'create', namespace: ns }],
    ['renew its Lease', { group: 'coordination.k8s.io', resource: 'leases', verb: 'update', namespace: ns, name: lease }],
    ['create Events in default', { group: 'events.k8s.io', resource: 'events', verb: 'create', namespace: 'default' }],
    ['add to an Event series in default', { group: 'events.k8s.io', resource: 'events', verb: 'patch', namespace: 'default' }],
    [
      'list the API servers (EndpointSlices in default)',
      { group: 'discovery.k8s.io', resource: 'endpointslices', verb: 'list', namespace: 'default' },
    ],
  ]
  const denied: Array<[string, Record<string, string>]> = [
    ['update (PUT) a CRD', { ...crds, verb: 'update', name: 'widgets.example.com' }],
    ['delete a CRD', { ...crds, verb: 'delete', name: 'widgets.example.com' }],
    ['create a CRD', { ...crds, verb: 'create' }],
    ['create a widget', { group: 'example.com', resource: 'widgets', verb: 'create', namespace: 'team-a' }],
    ['delete a widget', { group: 'example.com', resource: 'widgets', verb: 'delete', namespace: 'team-a', name: 'w' }],
    ['patch gadget status (not asked for)', { group: 'example.net', resource: 'gadgets', subresource: 'status', verb: 'patch', name: 'g' }],
    ['patch another group', { group: 'other.example.io', resource: 'things', verb: 'patch', namespace: 'x', name: 'y' }],
    ['read Secrets', { group: '', resource: 'secrets', verb: 'get', namespace: ns, name: 's' }],
    [
      'read its own state key (the kubelet mounts it)',
      { group: '', resource: 'secrets', verb: 'get', namespace: ns, name: `${lease}-state-key` },
    ],
    ['patch a Deployment', { group: 'apps', resource: 'deployments', verb: 'patch', namespace: ns, name: 'd' }],
    [
      'patch a webhook configuration',
      { group: 'admissionregistration.k8s.io', resource: 'validatingwebhookconfigurations', verb: 'patch', name: 'v' },
    ],
    [
      'patch an Ingress (networking.k8s.io is built in; gateway.networking.k8s.io is not)',
      { group: 'networking.k8s.io', resource: 'ingresses', verb: 'patch', namespace: 'x', name: 'i' },
    ],
    ['renew another Lease', { group: 'coordination.k8s.io', resource: 'leases', verb: 'update', namespace: ns, name: 'someone-else' }],
    ['create a Lease elsewhere', { group: 'coordination.k8s.io', resource: 'leases', verb: 'create', namespace: 'kube-system' }],
    ['create Events elsewhere', { group: 'events.k8s.io', resource: 'events', verb: 'create', namespace: 'kube-system' }],
    ['create core/v1 Events (events.k8s.io only)', { group: '', resource: 'events', verb: 'create', namespace: 'default' }],
    ['list EndpointSlices elsewhere', { group: 'discovery.k8s.io', resource: 'endpointslices', verb: 'list', namespace: 'kube-system' }],
    [
      'change EndpointSlices',
      { group: 'discovery.k8s.io', resource: 'endpointslices', verb: 'patch', namespace: 'default', name: 'kubernetes' },
    ],
    [
      'list StorageVersionMigrations (storageVersionMigrations.enabled is off)',
      { group: 'migration.k8s.io', resource: 'storageversionmigrations', verb: 'list' },
    ],
    [
      "patch kube-apiserver's own StorageVersionMigrations (migrator.engine=builtin only)",
      { group: 'storagemigration.k8s.io', resource: 'storageversionmigrations', verb: 'patch', name: 'm' },
    ],
  ]
  for (const [what, attrs] of allowed) t.ok(await can(attrs), `allowed: ${what}`)
  for (const [what, attrs] of denied) t.notOk(await can(attrs), `denied: ${what}`)
})

t.test(
  "kube-apiserver's own StorageVersionMigrations: engine own reads them, engine builtin also creates, deletes and wakes them",
  async (t) => {
    const builtins = { group: 'storagemigration.k8s.io', resource: 'storageversionmigrations' }
    for (const engine of ['own', 'builtin'] as const) {
      const ns = uniqueName(`chart-eng-${engine}`)
      await createNamespace(ns)
      const manifests = await template(uniqueName('en'), ns, { migrator: { engine } })
      const rule = rulesOf(migratorClusterRole(manifests)).find((r) => r.apiGroups?.includes(builtins.group))
      t.same(rule?.verbs, engine === 'own' ? ['get', 'list'] : ['get', 'list', 'patch', 'create', 'delete'], `engine ${engine}: the rule`)
      if (engine === 'own') t.same(rule, BASE_RULES.at(-1), 'the base rule')
      const can = await createRbacOf(t, manifests, ns)
      t.ok(await can({ ...builtins, verb: 'list' }), `engine ${engine}: may list them (one migrator at a time)`)
      for (const verb of ['patch', 'create', 'delete'])
        t.equal(
          await can({ ...builtins, verb, name: 'm' }),
          engine === 'builtin',
          `engine ${engine}: ${verb} ${engine === 'builtin' ? 'allowed' : 'denied'}`,
        )
    }
  },
)

t.test('RBAC of storageVersionMigrations and builtInResources, created for real: exactly what they name', async (t) => {
  const ns = uniqueName('chart-svm')
  await createNamespace(ns)
  const manifests = await template(uniqueName('sv'), ns, scenarios.find((s) => s.release === 'svm')!.values)
  const can = await createRbacOf(t, manifests, ns)
  const svms = { group: 'migration.k8s.io', resource: 'storageversionmigrations' }
  const allowed: Array<[string, Record<string, string>]> = [
    ['watch StorageVersionMigrations', { ...svms, verb: 'watch' }],
    ['list StorageVersionMigrations', { ...svms, verb: 'list' }],
    ['get a StorageVersionMigration', { ...svms, verb: 'get', name: 'm' }],
    ['patch a StorageVersionMigration', { ...svms, verb: 'patch', name: 'm' }],
    ['get its status', { ...svms, subresource: 'status', verb: 'get', name: 'm' }],
    ['patch its status', { ...svms, subresource: 'status', verb: 'patch', name: 'm' }],
    ['update (PUT) its status', { ...svms, subresource: 'status', verb: 'update', name: 'm' }],
    ['list Secrets in all namespaces', { group: '', resource: 'secrets', verb: 'list' }],
    ['get a Secret', { group: '', resource: 'secrets', verb: 'get', namespace: 'team-a', name: 's' }],
    ['patch a Secret', { group: '', resource: 'secrets', verb: 'patch', namespace: 'team-a', name: 's' }],
    ['list Deployments in all namespaces', { group: 'apps', resource: 'deployments', verb: 'list' }],
    ['patch a Deployment', { group: 'apps', resource: 'deployments', verb: 'patch', namespace: 'team-a', name: 'd' }],
  ]
  const denied: Array<[string, Record<string, string>]> = [
    ['create a StorageVersionMigration', { ...svms, verb: 'create' }],
    ['delete a StorageVersionMigration', { ...svms, verb: 'delete', name: 'm' }],
    ['delete every StorageVersionMigration', { ...svms, verb: 'deletecollection' }],
    ['update (PUT) a StorageVersionMigration', { ...svms, verb: 'update', name: 'm' }],
    [
      "create kube-apiserver's own StorageVersionMigrations (storagemigration.k8s.io; migrator.engine=builtin only)",
      { group: 'storagemigration.k8s.io', resource: 'storageversionmigrations', verb: 'create' },
    ],
    ['watch Secrets (only get, list, patch)', { group: '', resource: 'secrets', verb: 'watch' }],
    ['create a Secret', { group: '', resource: 'secrets', verb: 'create', namespace: 'team-a' }],
    ['update (PUT) a Secret', { group: '', resource: 'secrets', verb: 'update', namespace: 'team-a', name: 's' }],
    ['delete a Secret', { group: '', resource: 'secrets', verb: 'delete', namespace: 'team-a', name: 's' }],
    ['patch a ConfigMap (core, not listed)', { group: '', resource: 'configmaps', verb: 'patch', namespace: 'team-a', name: 'c' }],
    ['patch a Pod (core, not listed)', { group: '', resource: 'pods', verb: 'patch', namespace: 'team-a', name: 'p' }],
    ['patch a StatefulSet (apps, not listed)', { group: 'apps', resource: 'statefulsets', verb: 'patch', namespace: 'team-a', name: 's' }],
    [
      'scale a Deployment (a subresource)',
      { group: 'apps', resource: 'deployments', subresource: 'scale', verb: 'patch', namespace: 'team-a', name: 'd' },
    ],
    [
      'patch Deployment status (a subresource)',
      { group: 'apps', resource: 'deployments', subresource: 'status', verb: 'patch', namespace: 'team-a', name: 'd' },
    ],
    ['patch "secrets" of another group', { group: 'example.com', resource: 'secrets', verb: 'patch', namespace: 'team-a', name: 's' }],
    ['patch a ClusterRole', { group: 'rbac.authorization.k8s.io', resource: 'clusterroles', verb: 'patch', name: 'admin' }],
  ]
  for (const [what, attrs] of allowed) t.ok(await can(attrs), `allowed: ${what}`)
  for (const [what, attrs] of denied) t.notOk(await can(attrs), `denied: ${what}`)
})

t.test("RBAC of storageVersionMigrations.trigger, created for real: KSVM's trigger, nothing more", async (t) => {
  const ns = uniqueName('chart-trig')
  await createNamespace(ns)
  const manifests = await template(uniqueName('tr'), ns, {
    rbac: { managedGroups: ['example.com'] },
    storageVersionMigrations: { trigger: { enabled: true } },
  })
  const can = await createRbacOf(t, manifests, ns)
  const states = { group: 'migration.k8s.io', resource: 'storagestates' }
  const svms = { group: 'migration.k8s.io', resource: 'storageversionmigrations' }
  const allowed: Array<[string, Record<string, string>]> = [
    ['get a StorageState', { ...states, verb: 'get', name: 'widgets.example.com' }],
    ['list StorageStates (is their API served?)', { ...states, verb: 'list' }],
    ['create a StorageState', { ...states, verb: 'create' }],
    ['delete a stale StorageState', { ...states, verb: 'delete', name: 'widgets.example.com' }],
    ['update (PUT) its status', { ...states, subresource: 'status', verb: 'update', name: 'widgets.example.com' }],
    ['list StorageVersionMigrations', { ...svms, verb: 'list' }],
    ['watch StorageVersionMigrations', { ...svms, verb: 'watch' }],
    ['get a StorageVersionMigration', { ...svms, verb: 'get', name: 'm' }],
    ['create a StorageVersionMigration', { ...svms, verb: 'create' }],
    ["delete a resource's old StorageVersionMigration", { ...svms, verb: 'delete', name: 'm' }],
  ]
  const denied: Array<[string, Record<string, string>]> = [
    ['update (PUT) a StorageState', { ...states, verb: 'update', name: 'widgets.example.com' }],
    ['patch a StorageState', { ...states, verb: 'patch', name: 'widgets.example.com' }],
    ['delete every StorageState', { ...states, verb: 'deletecollection' }],
    ['delete every StorageVersionMigration', { ...svms, verb: 'deletecollection' }],
    ['patch a StorageVersionMigration (only enabled reconciles them)', { ...svms, verb: 'patch', name: 'm' }],
    ['update its status (only enabled reports on them)', { ...svms, subresource: 'status', verb: 'update', name: 'm' }],
  ]
  for (const [what, attrs] of allowed) t.ok(await can(attrs), `allowed: ${what}`)
  for (const [what, attrs] of denied) t.notOk(await can(attrs), `denied: ${what}`)
})

t.test('RBAC of stash rules, created for real: their stashes and referrers, nothing more, nothing when unset', async (t) => {
  const revisions = { group: 'apps', resource: 'controllerrevisions' }
  const vms = { group: 'kubevirt.io', resource: 'virtualmachines' }
  // What the preset's phase does (src/migrator/stashes/stash-phase.ts), in any namespace.
  const needed: Array<[string, Record<string, string>]> = [
    ['list ControllerRevisions in all namespaces', { ...revisions, verb: 'list' }],
    ['list ControllerRevisions in a namespace', { ...revisions, verb: 'list', namespace: 'vms' }],
    ['get a ControllerRevision', { ...revisions, verb: 'get', namespace: 'vms', name: 'r' }],
    ['create a ControllerRevision', { ...revisions, verb: 'create', namespace: 'vms' }],
    ['delete a ControllerRevision', { ...revisions, verb: 'delete', namespace: 'vms', name: 'r' }],
    ['list VirtualMachines in a namespace', { ...vms, verb: 'list', namespace: 'vms' }],
    ['list VirtualMachines in all namespaces', { ...vms, verb: 'list' }],
    ['get a VirtualMachine', { ...vms, verb: 'get', namespace: 'vms', name: 'vm' }],
    ['patch a VirtualMachine', { ...vms, verb: 'patch', namespace: 'vms', name: 'vm' }],
  ]
  const never: Array<[string, Record<string, string>]> = [
    ['update (PUT) a ControllerRevision', { ...revisions, verb: 'update', namespace: 'vms', name: 'r' }],
    ['patch a ControllerRevision', { ...revisions, verb: 'patch', namespace: 'vms', name: 'r' }],
    ['delete every ControllerRevision', { ...revisions, verb: 'deletecollection', namespace: 'vms' }],
    ['watch ControllerRevisions', { ...revisions, verb: 'watch' }],
    ['delete a VirtualMachine', { ...vms, verb: 'delete', namespace: 'vms', name: 'vm' }],
    ['create a VirtualMachine', { ...vms, verb: 'create', namespace: 'vms' }],
    ['update (PUT) a VirtualMachine', { ...vms, verb: 'update', namespace: 'vms', name: 'vm' }],
    ['patch VirtualMachine status', { ...vms, subresource: 'status', verb: 'patch', namespace: 'vms', name: 'vm' }],
    ['set finalizers on a VirtualMachine', { ...vms, subresource: 'finalizers', verb: 'update', namespace: 'vms', name: 'vm' }],
    [
      'patch a VirtualMachineInstance (kubevirt.io, not a referrer)',
      { group: 'kubevirt.io', resource: 'virtualmachineinstances', verb: 'patch', namespace: 'vms', name: 'vmi' },
    ],
    [
      'patch an instancetype (not in rbac.managedGroups)',
      { group: 'instancetype.kubevirt.io', resource: 'virtualmachineinstancetypes', verb: 'patch', namespace: 'vms', name: 'i' },
    ],
    ['create a Deployment (apps, not a stash)', { group: 'apps', resource: 'deployments', verb: 'create', namespace: 'vms' }],
    ['delete a StatefulSet (apps, not a stash)', { group: 'apps', resource: 'statefulsets', verb: 'delete', namespace: 'vms', name: 's' }],
  ]

  t.test('with the preset kubevirt-instancetypes', async (t) => {
    const ns = uniqueName('chart-stash')
    await createNamespace(ns)
    const can = await createRbacOf(t, await template(uniqueName('st'), ns, { migrator: { stashPresets: ['kubevirt-instancetypes'] } }), ns)
    for (const [what, attrs] of needed) t.ok(await can(attrs), `allowed: ${what}`)
    for (const [what, attrs] of never) t.notOk(await can(attrs), `denied: ${what}`)
  })

  t.test('with the preset narrowed to namespaces (the ClusterRole still covers all)', async (t) => {
    const ns = uniqueName('chart-stash')
    await createNamespace(ns)
    const values = {
      migrator: {
        stashes: [
          {
            preset: 'kubevirt-instancetypes',
            source: { group: 'apps', version: 'v1', resource: 'controllerrevisions', namespaces: ['vms'] },
          },
        ],
      },
    }
    const can = await createRbacOf(t, await template(uniqueName('st'), ns, values), ns)
    for (const [what, attrs] of needed) t.ok(await can(attrs), `allowed: ${what}`)
    t.ok(await can({ ...revisions, verb: 'delete', namespace: 'elsewhere', name: 'r' }), 'allowed: outside the listed namespaces too')
    for (const [what, attrs] of never) t.notOk(await can(attrs), `denied: ${what}`)
  })

  t.test('unset: none of it', async (t) => {
    const ns = uniqueName('chart-stash')
    await createNamespace(ns)
    const can = await createRbacOf(t, await template(uniqueName('st'), ns, {}), ns)
    for (const [what, attrs] of [...needed, ...never]) t.notOk(await can(attrs), `denied: ${what}`)
  })
})
