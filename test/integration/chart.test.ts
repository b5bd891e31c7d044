/**
 * The Helm chart (charts/crd-migrator): `helm lint`, `helm template` with default and
 * non-default values, the rendered ValidatingWebhookConfiguration against
 * renderWebhookConfiguration() (so the two cannot drift), the rendered config file against
 * the config schema, the committed plain manifests (webhook-config/plain/) against a fresh
 * render, and a server-side dry-run of every rendered object on the real kube-apiserver
 * (cert-manager's and the ServiceMonitor CRDs installed first). The RBAC of one render is
 * also created for real and probed with SubjectAccessReviews. Values that would grant more
 * (built-in API groups, extraConfig overriding annotations/identities) must fail the
 * render, and the state-key Secret must survive an upgrade (lookup, --dry-run=server).
 * The StorageVersionMigration CRD the chart installs (storageVersionMigrations.*) must equal
 * the one in kube-storage-version-migrator's Go module (scripts/build-ksvm.sh),
 * migrator.builtInResources must grant exactly the resources it lists, and the stash rules
 * (migrator.stashPresets / migrator.stashes, phase StashedObjectMigration) exactly their
 * stashes (get, list, create, delete) and referrers (get, list, patch).
 * The operators' options (issue #18): the `helm test` hook (rendered, dry-run, and its
 * script run against the real API server with the chart's RBAC and a real webhook), the
 * NetworkPolicy, hostNetwork, the PrometheusRule and the Grafana dashboard (whose
 * expressions may name only metrics the code registers), and the app.kubernetes.io labels
 * on every object of every render.
 *
 * The tests are split by concern, their shared setup in test/helpers/chart.ts and
 * test/helpers/chart-scenarios.ts:
 * - chart.test.ts (this file): every scenario rendered, linted, compared and dry-run on the
 *   API server, the labels of every render, the state key across an upgrade, and the plain
 *   manifests of webhook-config/plain/;
 * - chart-values.test.ts: values refused with a message, the groups the template refuses,
 *   values.yaml documented, what stash and StorageVersionMigration values render;
 * - chart-rbac.test.ts: the RBAC of a render created for real and probed with
 *   SubjectAccessReviews;
 * - chart-helm-test.test.ts: the `helm test` script run against the API server;
 * - chart-monitoring.test.ts: the metrics, the Grafana dashboard, the PrometheusRule and
 *   the NetworkPolicy.
 *
 * helm and the CRDs (cert-manager's, ServiceMonitor, PrometheusRule) come from
 * scripts/build-tools.sh (built from Go modules on first use).
 * Regenerate the plain manifests with: CRD_MIGRATOR_UPDATE_PLAIN_MANIFESTS=1 npx tap test/integration/chart.test.ts
 */
import { readFile, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import { isDeepStrictEqual } from 'node:util'
import t from 'tap'
import { parse, parseAllDocuments } from 'yaml'
import { resolveStashRules } from '../../src/migrator/phases/stashes/rules.js'
import { renderWebhookConfiguration } from '../../src/webhook/configuration.js'
import { uniqueName } from '../helpers/controlplane.js'
import {
  APP_LABELS,
  CHART_ONLY_LABELS,
  chartDir,
  CLUSTER_KINDS,
  collectionPath,
  configOf,
  cp,
  createNamespace,
  dryRunApply,
  dryRunCreate,
  helm,
  ids,
  installThirdPartyCrds,
  isTestHook,
  loadRenderedConfig,
  type Manifest,
  one,
  podSpec,
  RBAC_KINDS,
  repoRoot,
  type Rule,
  rulesOf,
  type T,
  template,
  templateRaw,
  valuesArgs,
  withoutChartLabels,
  migratorClusterRole,
} from '../helpers/chart.js'
import {
  APF_KINDS,
  apfExpected,
  BASE_RULES,
  checkTestHook,
  isStashSourceRule,
  migratorEnabled,
  OPS_VALUES,
  scenarios,
  stashRbac,
  STATE_KEY_DIR,
  stateKeySecretName,
  SVM_RULES,
  svmEnabled,
} from '../helpers/chart-scenarios.js'

/**
 * Dry-run every manifest, plus a Pod made from the Deployment's pod template (PodSecurity
 * admission enforces the namespace's restricted level on Pods only). Returns kind/name ->
 * HTTP status.
 */
async function dryRunAll(
  t: T,
  manifests: Manifest[],
  namespace: string,
  level: 'restricted' | 'privileged' = 'restricted',
): Promise<Record<string, number>> {
  const results: Record<string, number> = {}
  for (const m of manifests) {
    const res = m.kind === 'CustomResourceDefinition' ? await dryRunApply(m) : await dryRunCreate(m, namespace)
    results[`${m.kind}/${m.metadata.name}`] = res.status
    t.ok(res.status === 201 || res.status === 200, `dry-run create ${m.kind}/${m.metadata.name}: HTTP ${res.status}`, {
      body: res.status >= 300 ? res.body.slice(0, 2000) : undefined,
    })
  }
  const deployment = one(manifests, 'Deployment')
  const template = (deployment['spec'] as { template: { metadata: object; spec: object } }).template
  const pod = {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { ...template.metadata, name: `${deployment.metadata.name}-probe`, namespace },
    spec: template.spec,
  } as Manifest
  const res = await dryRunCreate(pod, namespace)
  results[`Pod/${pod.metadata.name} (from the Deployment, ${level} namespace)`] = res.status
  t.equal(res.status, 201, `the pod template passes PodSecurity "${level}" admission`, {
    body: res.status >= 300 ? res.body.slice(0, 2000) : undefined,
  })
  return results
}
/**
 * Least privilege: `create` only on leases and events, no wildcard verbs, no delete/update
 * of CRDs. `stashSources` (the stash rules' sources, as ClusterRole rules) may be created
 * and deleted too, and nothing else.
 */
function checkLeastPrivilege(t: T, manifests: Manifest[], allowWildcardGroups: boolean, stashSources: Rule[] = []) {
  for (const role of manifests.filter((m) => m.kind === 'ClusterRole' || m.kind === 'Role')) {
    for (const rule of rulesOf(role)) {
      t.notOk(rule.verbs.includes('*'), `${role.kind}/${role.metadata.name}: no wildcard verb`)
      const stashSource = role.kind === 'ClusterRole' && stashSources.some((s) => isDeepStrictEqual(s, rule))
      for (const forbidden of ['delete', 'deletecollection', 'escalate', 'bind', 'impersonate']) {
        if (forbidden === 'delete' && stashSource) continue
        t.notOk(rule.verbs.includes(forbidden), `${role.kind}/${role.metadata.name}: no ${forbidden}`)
      }
      if (rule.verbs.includes('create')) {
        t.ok(
          stashSource || (rule.resources ?? []).every((r) => r === 'leases' || r === 'events'),
          `${role.kind}/${role.metadata.name}: create only on leases, events and stash sources, not ${rule.resources}`,
        )
      }
      if (!allowWildcardGroups) t.notOk(rule.apiGroups?.includes('*'), `${role.kind}/${role.metadata.name}: no wildcard API group`)
    }
  }
}

/** kind/name -> dry-run status, per scenario, printed at the end (the report reads it). */
const dryRunReport: Record<string, Record<string, number>> = {}
for (const scenario of scenarios) {
  t.test(scenario.name, async (t) => {
    const ns = uniqueName('chart')
    const rendered = await template(scenario.release, ns, scenario.values)
    // What `helm install` installs; the `helm test` hook has its own subtest.
    const manifests = rendered.filter((m) => !isTestHook(m))

    t.test('helm lint --strict', async (t) => {
      const r = await helm(['lint', chartDir, '--strict', '--namespace', ns, ...(await valuesArgs(scenario.values))])
      t.equal(r.code, 0, 'helm lint passes', { output: r.stdout + r.stderr })
      t.match(r.stdout, /1 chart\(s\) linted, 0 chart\(s\) failed/)
    })

    t.test('renders the expected objects', async (t) => {
      t.same(ids(rendered.filter((m) => !APF_KINDS.includes(m.kind))).sort(), scenario.kinds.map((k) => k.replace('NS', ns)).sort())
      t.equal(
        rendered.some((m) => APF_KINDS.includes(m.kind)),
        apfExpected(scenario.values),
        'API Priority and Fairness objects where the chart has them, enabled, with the migrator',
      )
      const dashboardNamespace = scenario.values['grafanaDashboard']?.namespace || ns
      for (const m of rendered) {
        if (CLUSTER_KINDS.includes(m.kind)) {
          t.notOk(m.metadata.namespace, `${m.kind} is cluster-scoped`)
        } else if (m.kind === 'Role' || m.kind === 'RoleBinding') {
          t.ok(
            m.metadata.namespace === ns || (m.metadata.namespace === 'default' && m.metadata.name.endsWith('-events')),
            `${m.kind}/${m.metadata.name} namespace`,
          )
        } else if (m.kind === 'ConfigMap' && m.metadata.name.endsWith('-dashboard')) {
          t.equal(m.metadata.namespace, dashboardNamespace, `${m.kind}/${m.metadata.name} is in grafanaDashboard.namespace`)
        } else {
          t.equal(m.metadata.namespace, ns, `${m.kind}/${m.metadata.name} is in the release namespace`)
        }
      }
    })

    t.test("the ValidatingWebhookConfiguration is renderWebhookConfiguration() with this release's names", async (t) => {
      const vwc = one(manifests, 'ValidatingWebhookConfiguration')
      t.same(withoutChartLabels(vwc), renderWebhookConfiguration(scenario.webhook(ns)))
      t.same(
        Object.keys(vwc.metadata.labels ?? {}).sort(),
        [...CHART_ONLY_LABELS, 'app.kubernetes.io/name', 'app.kubernetes.io/component'].sort(),
      )
    })

    t.test('the config file passes the config schema', async (t) => {
      const { text } = configOf(t, manifests)
      const config = await loadRenderedConfig(text)
      const sa = one(manifests, 'ServiceAccount').metadata.name
      t.equal(
        config.identities.migratorUsers[0],
        `system:serviceaccount:${ns}:${sa}`,
        "the chart's ServiceAccount is the migrator identity",
      )
      t.equal(config.webhook.certFile, '/tls/tls.crt')
      t.equal(config.webhook.keyFile, '/tls/tls.key')
      t.equal(config.leaderElection.enabled, true)
      t.equal(config.leaderElection.leaseName, one(manifests, 'Deployment').metadata.name)
      const webhook = renderWebhookConfiguration(scenario.webhook(ns))
      t.ok(
        webhook.webhooks[0]!.matchConditions[0]!.expression.includes(`'${config.annotations.migrating}'`),
        'webhook and server use one annotation key',
      )
      t.same(
        renderWebhookConfiguration({
          ...scenario.webhook(ns),
          migratorUsers: config.identities.migratorUsers,
          migratorGroups: config.identities.migratorGroups,
        }),
        webhook,
        'the webhook configuration skips exactly the identities the server treats as the migrator',
      )
      const v = scenario.values
      const raw = parse(text) as { migrator: Record<string, unknown> }
      if (migratorEnabled(v)) {
        t.equal(config.migrator.enabled, true)
        t.equal(raw.migrator['stateKeyFile'], `${STATE_KEY_DIR}/key`, 'migrator.stateKeyFile is the mounted state key')
      } else {
        t.equal(config.migrator.enabled, false, 'webhook only')
        t.notOk('stateKeyFile' in raw.migrator, 'no state key without the migrator')
      }
      if (svmEnabled(v)) {
        t.equal(raw.migrator['storageVersionMigrations'], true, 'migrator.storageVersionMigrations: true')
        t.equal(config.migrator.storageVersionMigrations, true)
      } else {
        t.notOk('storageVersionMigrations' in raw.migrator, 'no migrator.storageVersionMigrations key unless enabled')
        t.equal(config.migrator.storageVersionMigrations, false, 'the default: off')
      }
      t.notOk('builtInResources' in raw.migrator, 'builtInResources is RBAC only, not config')
      const stashPresets = v['migrator']?.stashPresets
      const stashes = v['migrator']?.stashes
      if (stashPresets) t.same(raw.migrator['stashPresets'], stashPresets, 'migrator.stashPresets as given')
      else t.notOk('stashPresets' in raw.migrator, 'no migrator.stashPresets key unless set')
      if (stashes) t.same(raw.migrator['stashes'], stashes, 'migrator.stashes as given')
      else t.notOk('stashes' in raw.migrator, 'no migrator.stashes key unless set')
      // The RBAC covers what the migrator will do with the rules it resolves from this config.
      const resolved = resolveStashRules(config.migrator.stashPresets, config.migrator.stashes)
      t.equal(resolved.length, (stashPresets?.length ?? 0) + (stashes?.length ?? 0), 'every stash rule resolves')
      const clusterRole = manifests.find(
        (m) => m.kind === 'ClusterRole' && !['consent', 'freeze'].includes(m.metadata.labels?.['app.kubernetes.io/component'] ?? ''),
      )
      if (clusterRole) {
        const cr = rulesOf(clusterRole)
        t.same(
          cr.slice(cr.length - (scenario.stashRules?.length ?? 0)),
          stashRbac(resolved),
          "the ClusterRole's stash rules are those of the config's resolved stash rules",
        )
      }
      if (v['migrator']?.selector !== undefined) {
        t.equal(config.migrator.selector.labelSelector, v['migrator'].selector)
        t.same(config.migrator.selector.names, v['migrator'].names)
        t.equal(config.migrator.concurrency, v['migrator'].concurrency)
        t.equal(config.migrator.qps, v['migrator'].qps)
        t.same(config.migrator.skipPhases, v['migrator'].skipPhases)
        t.match(config.migrator.crds['widgets.example.com'], { useStatusSubresource: true, concurrency: 4, qps: 10 })
        t.equal(config.migrator.pageSize, 200, 'extraConfig is merged')
        t.same(config.identities.migratorUsers.slice(1), ['ops-bot'])
        t.same(config.identities.breakGlassGroups, ['system:masters', 'oncall'])
        t.equal(config.logLevel, 'debug')
        t.equal(config.webhook.port, 10443)
        t.equal(config.metrics.port, 9090)
      } else {
        t.equal(config.migrator.selector.labelSelector, 'crd-migrator.io/managed=true')
        t.same(config.identities.breakGlassGroups, ['system:masters'])
        t.equal(config.webhook.port, v['webhook']?.port ?? 9443)
        t.equal(config.metrics.port, v['metrics']?.port ?? 8080)
      }
    })

    t.test('pod: restricted security context, probes, mounts, identity', async (t) => {
      const spec = podSpec(manifests)
      const c = spec['containers'][0]
      t.match(spec['securityContext'], { runAsNonRoot: true, seccompProfile: { type: 'RuntimeDefault' } })
      t.match(c.securityContext, {
        runAsNonRoot: true,
        readOnlyRootFilesystem: true,
        allowPrivilegeEscalation: false,
        capabilities: { drop: ['ALL'] },
        seccompProfile: { type: 'RuntimeDefault' },
      })
      t.same(c.args, ['serve', '--config', '/etc/crd-migrator/config.yaml'])
      t.match(c.livenessProbe, { httpGet: { path: '/healthz', port: 'metrics' } })
      t.match(c.readinessProbe, { httpGet: { path: '/readyz', port: 'metrics' } })
      t.ok(c.resources.requests && c.resources.limits, 'requests and limits')
      t.same(
        c.env.map((e: { name: string }) => e.name),
        ['POD_NAMESPACE', 'POD_NAME'],
      )
      const tlsVolume = spec['volumes'].find((v: { name: string }) => v.name === 'tls')
      const tlsMount = c.volumeMounts.find((m: { name: string }) => m.name === 'tls')
      t.equal(tlsMount.mountPath, '/tls')
      t.notOk(tlsMount.subPath, 'no subPath: renewals reach the pod')
      const expectedSecret = scenario.values['tls']?.existingSecret ?? `${one(manifests, 'Deployment').metadata.name}-serving-tls`
      t.equal(tlsVolume.secret.secretName, expectedSecret)
      const cert = manifests.find((m) => m.kind === 'Certificate' && m.metadata.name.endsWith('-serving'))
      if (cert) {
        const svc = one(manifests, 'Service').metadata.name
        t.match(cert['spec'], {
          secretName: expectedSecret,
          dnsNames: [svc, `${svc}.${ns}`, `${svc}.${ns}.svc`, `${svc}.${ns}.svc.cluster.local`],
        })
      }
      const ports = Object.fromEntries(c.ports.map((p: { name: string; containerPort: number }) => [p.name, p.containerPort]))
      const svcPorts = (one(manifests, 'Service')['spec'] as { ports: Array<{ name: string; port: number; targetPort: string }> }).ports
      t.same(
        svcPorts.map((p) => [p.name, p.targetPort]),
        [
          ['webhook', 'webhook'],
          ['metrics', 'metrics'],
        ],
      )
      t.equal(ports['webhook'], scenario.values['webhook']?.port ?? 9443)
      t.equal(ports['metrics'], scenario.values['metrics']?.port ?? 8080)
      // /metrics, /healthz and /readyz are on the ops listener only: the webhook port serves reviews.
      const monitor = manifests.find((m) => m.kind === 'ServiceMonitor')
      if (monitor)
        t.match(monitor['spec'], { endpoints: [{ port: 'metrics', path: '/metrics' }] }, 'the ServiceMonitor scrapes the ops listener')
      t.equal((one(manifests, 'Deployment')['spec'] as { replicas: number }).replicas, scenario.values['replicaCount'] ?? 2)
      if (scenario.values['hostNetwork']) {
        t.equal(spec['hostNetwork'], true, "hostNetwork: on the node's network")
        t.equal(spec['dnsPolicy'], 'ClusterFirstWithHostNet', 'still resolving cluster names')
      } else {
        t.notOk('hostNetwork' in spec, 'the pod network')
        t.notOk('dnsPolicy' in spec, 'the default DNS policy')
      }

      const enabled = migratorEnabled(scenario.values)
      t.equal(spec['automountServiceAccountToken'], enabled, `pod: ServiceAccount token mounted only with the migrator (${enabled})`)
      t.equal(one(manifests, 'ServiceAccount')['automountServiceAccountToken'], enabled, 'ServiceAccount: the same')
      const keyVolume = spec['volumes'].find((v: { name: string }) => v.name === 'state-key')
      const keyMount = c.volumeMounts.find((m: { name: string }) => m.name === 'state-key')
      if (enabled) {
        t.same(keyMount, { name: 'state-key', mountPath: STATE_KEY_DIR, readOnly: true }, 'the state key is mounted read-only')
        t.same(keyVolume, {
          name: 'state-key',
          secret: { secretName: stateKeySecretName(scenario, manifests), items: [{ key: 'key', path: 'key' }], defaultMode: 0o440 },
        })
      } else {
        t.notOk(keyVolume, 'no state-key volume without the migrator')
        t.notOk(keyMount, 'no state-key mount without the migrator')
      }
    })

    t.test('the state-key Secret', async (t) => {
      const secrets = manifests.filter((m) => m.kind === 'Secret')
      if (!migratorEnabled(scenario.values) || scenario.values['migrator']?.stateKey?.existingSecret) {
        t.same(ids(secrets), [], "none: webhook only, or the user's own Secret")
        return
      }
      const name = stateKeySecretName(scenario, manifests)
      t.equal(name, `${one(manifests, 'Deployment').metadata.name}-state-key`)
      const secret = one(manifests, 'Secret', name)
      t.equal(secret['type'], 'Opaque')
      const data = secret['data'] as Record<string, string>
      t.same(Object.keys(data), ['key'])
      const text = Buffer.from(data['key']!, 'base64').toString('utf8')
      t.match(text, /^[A-Za-z0-9+/]{43}=$/, 'the key file holds base64 text')
      t.equal(Buffer.from(text, 'base64').length, 32, 'of 32 random bytes')
      // helm template cannot look the Secret up: every render makes a new key.
      const again = one(await template(scenario.release, ns, scenario.values), 'Secret', name)
      t.not((again['data'] as Record<string, string>)['key'], data['key'], 'a new key per render without lookup')
    })

    t.test('RBAC is least privilege', async (t) => {
      if (!migratorEnabled(scenario.values)) {
        t.same(
          ids(manifests.filter((m) => RBAC_KINDS.includes(m.kind))),
          [`ClusterRole/${scenario.release}-crd-migrator-freeze`],
          "webhook only: no ClusterRole, Role or binding for the ServiceAccount; only people's freeze ClusterRole, bound to nobody",
        )
        return
      }
      checkLeastPrivilege(t, manifests, Boolean(scenario.values['rbac']?.allGroups), (scenario.stashRules ?? []).filter(isStashSourceRule))
      const all = rulesOf(migratorClusterRole(manifests))
      // The stash rules come last.
      const cr = all.slice(0, all.length - (scenario.stashRules?.length ?? 0))
      t.same(all.slice(cr.length), scenario.stashRules ?? [], 'the stash rules, exactly')
      if (!scenario.stashRules) {
        t.notOk(
          all.some((r) => r.verbs.includes('create') || r.verbs.includes('delete')),
          'no create or delete in the ClusterRole without stash rules',
        )
        t.notOk(
          all.some((r) => r.resources?.includes('controllerrevisions') || r.apiGroups?.includes('kubevirt.io')),
          'no ControllerRevision or KubeVirt rule without stash rules',
        )
      }
      t.same(cr.slice(0, BASE_RULES.length), BASE_RULES)
      if (scenario.values['rbac']?.allGroups) {
        t.same(cr.slice(BASE_RULES.length), [{ apiGroups: ['*'], resources: ['*'], verbs: ['get', 'list', 'patch'] }])
      } else if (svmEnabled(scenario.values)) {
        t.same(cr.slice(BASE_RULES.length), [
          { apiGroups: [''], resources: ['secrets'], verbs: ['get', 'list', 'patch'] },
          { apiGroups: ['apps'], resources: ['deployments'], verbs: ['get', 'list', 'patch'] },
          ...SVM_RULES,
        ])
      } else if (scenario.values['rbac']?.managedGroups) {
        t.same(cr.slice(BASE_RULES.length), [
          { apiGroups: ['example.com'], resources: ['*'], verbs: ['get', 'list', 'patch'] },
          { apiGroups: ['stable.example.org'], resources: ['*'], verbs: ['get', 'list', 'patch'] },
          { apiGroups: ['gateway.networking.k8s.io'], resources: ['*'], verbs: ['get', 'list', 'patch'] },
          { apiGroups: ['example.net'], resources: ['gadgets'], verbs: ['get', 'list', 'patch'] },
          { apiGroups: ['example.com'], resources: ['widgets'], verbs: ['get', 'list', 'patch'] },
          { apiGroups: ['example.com'], resources: ['widgets/status'], verbs: ['patch'] },
        ])
      } else {
        t.equal(cr.length, BASE_RULES.length, 'no custom-resource access until the operator names groups (stash rules aside)')
      }
      if (!svmEnabled(scenario.values)) {
        t.notOk(
          cr.some((r) => r.apiGroups?.includes('migration.k8s.io')),
          'no StorageVersionMigration rule without storageVersionMigrations.enabled',
        )
        t.notOk(
          cr.some((r) => r.apiGroups?.includes('') || r.apiGroups?.includes('apps')),
          'no built-in resource without migrator.builtInResources',
        )
      }
      const lease = manifests.find((m) => m.kind === 'Role' && m.metadata.name.endsWith('-leader-election'))!
      t.same(rulesOf(lease), [
        { apiGroups: ['coordination.k8s.io'], resources: ['leases'], verbs: ['create'] },
        {
          apiGroups: ['coordination.k8s.io'],
          resources: ['leases'],
          resourceNames: [one(manifests, 'Deployment').metadata.name],
          verbs: ['get', 'update'],
        },
      ])
      const events = manifests.find((m) => m.kind === 'Role' && m.metadata.namespace === 'default')!
      t.same(rulesOf(events), [
        { apiGroups: ['events.k8s.io'], resources: ['events'], verbs: ['create', 'patch'] },
        { apiGroups: ['discovery.k8s.io'], resources: ['endpointslices'], verbs: ['get', 'list'] },
      ])
    })

    if (scenario.values['hostNetwork']) {
      t.test('Pod Security: host networking needs a privileged namespace (docs/install.md, Helm values)', async (t) => {
        const restricted = uniqueName('chart-hn')
        await createNamespace(restricted)
        const deployment = one(manifests, 'Deployment')
        const template = (deployment['spec'] as { template: { metadata: object; spec: object } }).template
        const pod = {
          apiVersion: 'v1',
          kind: 'Pod',
          metadata: { ...template.metadata, name: 'hn', namespace: restricted },
          spec: template.spec,
        }
        const res = await dryRunCreate(pod, restricted)
        t.equal(res.status, 403, 'refused in a restricted namespace')
        t.match(res.body, /hostNetwork=true/, 'for host networking')
      })
    }

    if (scenario.values['tests']?.enabled) {
      t.test('the helm test hook: a restricted Pod of the chart image, with a narrow identity of its own', async (t) => {
        checkTestHook(t, rendered, ns)
      })
    }

    t.test('server-side dry-run on the kube-apiserver', async (t) => {
      await installThirdPartyCrds()
      await createNamespace(ns, scenario.podSecurity)
      if (scenario.values['grafanaDashboard']?.namespace) await createNamespace(scenario.values['grafanaDashboard'].namespace)
      dryRunReport[scenario.name] = await dryRunAll(t, rendered, ns, scenario.podSecurity)
    })
  })
}

// --- labels ----------------------------------------------------------------------------------

t.test('every object of every render carries the app.kubernetes.io labels', async (t) => {
  // Every scenario, and every option on at once (with a nameOverride).
  const renders: Array<[string, string, Record<string, any>]> = scenarios.map((s) => [s.name, s.release, s.values])
  renders.push([
    'everything on, nameOverride',
    'all',
    {
      ...OPS_VALUES,
      nameOverride: 'migrator',
      storageVersionMigrations: { enabled: true },
      migrator: { stashPresets: ['kubevirt-instancetypes'] },
    },
  ])
  renders.push([
    'webhook only, helm test',
    'who',
    { migrator: { enabled: false }, tests: { enabled: true }, grafanaDashboard: { enabled: true } },
  ])
  for (const [what, release, values] of renders) {
    const rendered = await template(release, 'labels-ns', values)
    const name = values['nameOverride'] ?? 'crd-migrator'
    for (const m of rendered) {
      const labels = m.metadata.labels ?? {}
      const id = `${what}: ${m.kind}/${m.metadata.name}`
      t.same(
        APP_LABELS.filter((l) => !labels[l]),
        [],
        `${id} has every app.kubernetes.io label`,
      )
      // The ValidatingWebhookConfiguration's name and component are renderWebhookConfiguration()'s.
      t.equal(labels['app.kubernetes.io/name'], m.kind === 'ValidatingWebhookConfiguration' ? 'crd-migrator' : name, `${id}: name`)
      t.equal(labels['app.kubernetes.io/instance'], release, `${id}: instance`)
      t.equal(labels['app.kubernetes.io/part-of'], 'crd-migrator', `${id}: part-of`)
      t.equal(labels['app.kubernetes.io/managed-by'], 'Helm', `${id}: managed-by`)
      t.equal(labels['app.kubernetes.io/version'], '0.1.0', `${id}: version (appVersion)`)
      if (m.kind === 'Deployment') {
        const pod = (m['spec'] as { template: { metadata: { labels: Record<string, string> } } }).template.metadata.labels
        t.same(
          APP_LABELS.filter((l) => !pod[l]),
          [],
          `${id}: its pods too`,
        )
      }
    }
    const components = new Set(rendered.map((m) => m.metadata.labels?.['app.kubernetes.io/component']))
    t.ok(components.has('server'), `${what}: components ${[...components].join(', ')}`)
  }
})

t.test('the dry-run check has teeth: broken objects are refused', async (t) => {
  await installThirdPartyCrds()
  const ns = uniqueName('chart-neg')
  await createNamespace(ns)
  const manifests = await template('neg', ns, {})
  const cert = structuredClone(one(manifests, 'Certificate', 'neg-crd-migrator-serving'))
  ;(cert['spec'] as Record<string, unknown>)['dnsNamez'] = ['typo']
  t.not((await dryRunCreate(cert, ns)).status, 201, 'an unknown field in a cert-manager Certificate (strict field validation)')

  const vwc = structuredClone(one(manifests, 'ValidatingWebhookConfiguration'))
  ;(vwc['webhooks'] as Array<{ matchConditions: Array<{ expression: string }> }>)[0]!.matchConditions[0]!.expression = "'unterminated"
  t.equal((await dryRunCreate(vwc, ns)).status, 422, 'a matchCondition that does not compile')

  const spec = structuredClone(podSpec(manifests))
  spec['containers'][0].securityContext = { ...spec['containers'][0].securityContext, allowPrivilegeEscalation: true }
  const pod = { apiVersion: 'v1', kind: 'Pod', metadata: { name: 'escalating', namespace: ns }, spec } as Manifest
  t.equal((await dryRunCreate(pod, ns)).status, 403, 'a pod that may escalate privileges, in the restricted namespace')
})

t.test('the state key survives an upgrade: lookup keeps the existing Secret', async (t) => {
  const ns = uniqueName('chart-key')
  await createNamespace(ns)
  const release = 'keep'
  const name = 'keep-crd-migrator-state-key'
  const installed = one(await template(release, ns, {}), 'Secret', name)
  const path = await collectionPath(installed, ns)
  // As `helm install` leaves it: owned by the release.
  const owned = structuredClone(installed)
  owned.metadata.annotations = { 'meta.helm.sh/release-name': release, 'meta.helm.sh/release-namespace': ns }
  const created = await cp.apiRequest(path, { method: 'POST', body: owned })
  t.equal(created.status, 201, "the install's Secret exists", { body: created.status >= 300 ? created.body : undefined })
  t.teardown(async () => {
    await cp.apiRequest(`${path}/${name}`, { method: 'DELETE' })
  })
  // An upgrade renders against the cluster: --dry-run=server lets lookup see it.
  const r = await helm(['template', release, chartDir, '--namespace', ns, '--dry-run=server', '--kubeconfig', cp.kubeconfigPath])
  t.equal(r.code, 0, 'helm template --dry-run=server', { stderr: r.stderr })
  const upgraded = one(
    parseAllDocuments(r.stdout)
      .map((d) => d.toJS() as Manifest | null)
      .filter((m): m is Manifest => m !== null),
    'Secret',
    name,
  )
  t.equal(
    (upgraded['data'] as Record<string, string>)['key'],
    (installed['data'] as Record<string, string>)['key'],
    'the same key after the upgrade',
  )
})

const plainDir = join(repoRoot, 'webhook-config', 'plain')
const PLAIN_FILE = join(plainDir, 'crd-migrator.yaml')
const PLAIN_HEADER = [
  '# crd-migrator for clusters without Helm: the chart (charts/crd-migrator) rendered with its',
  '# default values, release name crd-migrator, namespace crd-migrator. Needs cert-manager.',
  '# Except the state key, which no one should share: create the Secret crd-migrator-state-key',
  '# (32 random bytes under `key`; README, Install) in namespace crd-migrator.',
  '# Apply with: kubectl apply -k webhook-config/plain/   (namespace.yaml first, then this file)',
  '# Generated; do not edit. test/integration/chart.test.ts checks it against the chart;',
  '# regenerate with CRD_MIGRATOR_UPDATE_PLAIN_MANIFESTS=1 npx tap test/integration/chart.test.ts',
  '',
].join('\n')
/**
 * The plain manifests' values: the defaults, but no state-key Secret (a committed key would be everybody's key),
 * and no uninstall hook (without Helm nothing runs it: docs/install.md's manual steps uninstall them).
 */
const PLAIN_VALUES = { migrator: { stateKey: { existingSecret: 'crd-migrator-state-key' } }, liftFreezesHook: { enabled: false } }

t.test('webhook-config/plain/ is the default render', async (t) => {
  const rendered = PLAIN_HEADER + (await templateRaw('crd-migrator', 'crd-migrator', PLAIN_VALUES))
  if (process.env['CRD_MIGRATOR_UPDATE_PLAIN_MANIFESTS'] === '1') {
    await writeFile(PLAIN_FILE, rendered)
    t.comment(`wrote ${PLAIN_FILE}`)
  }
  const committed = await readFile(PLAIN_FILE, 'utf8').catch(() => '')
  t.equal(
    committed,
    rendered,
    'webhook-config/plain/crd-migrator.yaml is up to date (regenerate: CRD_MIGRATOR_UPDATE_PLAIN_MANIFESTS=1 npx tap test/integration/chart.test.ts)',
  )

  const manifests = parseAllDocuments(committed)
    .map((d) => d.toJS() as Manifest | null)
    .filter((m): m is Manifest => m !== null)
  t.same(ids(manifests.filter((m) => m.kind === 'Secret')), [], 'no Secret, no state key in the repository')
  t.equal(
    podSpec(manifests)['volumes'].find((v: { name: string }) => v.name === 'state-key')?.secret.secretName,
    'crd-migrator-state-key',
    'the pods mount the Secret the chart would have made',
  )
  // The in-cluster variant everyone else uses (webhook-config/validating-webhook.yaml) is the
  // chart's default render, bar the chart's labels.
  const vwc = withoutChartLabels(one(manifests, 'ValidatingWebhookConfiguration'))
  t.same(vwc, parse(await readFile(join(repoRoot, 'webhook-config', 'validating-webhook.yaml'), 'utf8')))
  t.same(vwc, renderWebhookConfiguration({ mode: 'service' }))
  t.same(parse(await readFile(join(plainDir, 'namespace.yaml'), 'utf8')), {
    apiVersion: 'v1',
    kind: 'Namespace',
    metadata: { name: 'crd-migrator', labels: { 'pod-security.kubernetes.io/enforce': 'restricted' } },
  })
  const kustomization = parse(await readFile(join(plainDir, 'kustomization.yaml'), 'utf8')) as { resources: string[]; namespace?: string }
  t.same(kustomization.resources, ['namespace.yaml', 'crd-migrator.yaml'])
  t.notOk(kustomization.namespace, 'no namespace override: the Events Role lives in `default`')
})

t.teardown(() => {
  if (Object.keys(dryRunReport).length > 0) {
    process.stderr.write(`[chart] server-side dry-run results:\n${JSON.stringify(dryRunReport, null, 2)}\n`)
  }
})
