/**
 * The chart's scenarios (values, the objects each renders, its webhook configuration and
 * stash rules) and what the renders must hold in common: the ClusterRole's base and
 * StorageVersionMigration rules, the state key's mount, the `helm test` hook.
 */
import { existsSync } from 'node:fs'
import { readFile } from 'node:fs/promises'
import { join } from 'node:path'
import { isDeepStrictEqual } from 'node:util'
import { parse } from 'yaml'
import type { StashRule } from '../../src/migrator/phases/stashes/rules.js'
import { generateDevCertificates } from '../../dev/certs/devcerts.js'
import { renderWebhookConfiguration, WEBHOOK_NAME } from '../../src/webhook/configuration.js'
import { uniqueName } from './controlplane.js'
import { chartDir, ids, isTestHook, type Manifest, one, podSpec, type Rule, rulesOf, scratch, service, type T } from './chart.js'

// --- the chart's scenarios ------------------------------------------------------------------

const pemDir = join(scratch, 'ca')
const devCerts = await generateDevCertificates(pemDir, { serviceName: 'plain-crd-migrator', namespace: 'crd-migrator' })
const caPem = await readFile(devCerts.caCertFile, 'utf8')

export interface Scenario {
  name: string
  release: string
  values: Record<string, any>
  /** Expected names and options for renderWebhookConfiguration(). */
  webhook: (namespace: string) => Parameters<typeof renderWebhookConfiguration>[0]
  kinds: string[]
  /** The ClusterRole's stash rules (the last ones), exactly; none when unset. */
  stashRules?: Rule[]
  /** The Pod Security level the pods need (hostNetwork: privileged); restricted when unset. */
  podSecurity?: 'privileged'
}

/** The ClusterRole rules of a stash's source and of a referrer. */
export const stashSourceRule = (group: string, resource: string): Rule => ({
  apiGroups: [group],
  resources: [resource],
  verbs: ['get', 'list', 'create', 'delete'],
})
export const stashReferrerRule = (group: string, resource: string): Rule => ({
  apiGroups: [group],
  resources: [resource],
  verbs: ['get', 'list', 'patch'],
})
export const isStashSourceRule = (r: Rule) => r.verbs.includes('create') && r.verbs.includes('delete')

/**
 * What runStashPhase (src/migrator/stashes/stash-phase.ts) calls, as ClusterRole rules, for
 * resolved stash rules: list, create, get and delete (uid precondition) on the source,
 * list, get and patch (JSON patch) on each referrer. Duplicates dropped, in order.
 */
export function stashRbac(rules: readonly StashRule[]): Rule[] {
  const out: Rule[] = []
  const add = (r: Rule) => {
    if (!out.some((o) => isDeepStrictEqual(o, r))) out.push(r)
  }
  for (const rule of rules) {
    add(stashSourceRule(rule.source.group, rule.source.resource))
    for (const r of rule.referrers) add(stashReferrerRule(r.group, r.resource))
  }
  return out
}

/** The kinds of a default render for release <release>. */
export const defaultKinds = (release: string) =>
  [
    'ServiceAccount/F',
    'ConfigMap/F',
    'Secret/F-state-key',
    'ClusterRole/F',
    'ClusterRole/F-accept-changes',
    'ClusterRole/F-freeze',
    'ValidatingAdmissionPolicy/F-consent',
    'ValidatingAdmissionPolicyBinding/F-consent',
    'ClusterRoleBinding/F',
    'Role/F-leader-election',
    'Role/F-NS-events',
    'RoleBinding/F-leader-election',
    'RoleBinding/F-NS-events',
    'Service/F',
    'Deployment/F',
    'Pod/F-lift-freezes',
    'Certificate/F-ca',
    'Certificate/F-serving',
    'Issuer/F-selfsigned',
    'Issuer/F-ca',
    'PodDisruptionBudget/F',
    'ValidatingWebhookConfiguration/F.crd-migrator.io',
  ].map((k) => k.replace(/F/, `${release}-crd-migrator`))

/** The objects of the `helm test` hook (tests.enabled) of a release whose full name is F, in namespace NS. */
export const testKinds = (fullname: string) =>
  [
    'ServiceAccount/F-test',
    'ClusterRole/F-test',
    'ClusterRoleBinding/F-test',
    'CustomResourceDefinition/probes.F.NS.helm-test.crd-migrator.io',
    'ConfigMap/F-test',
    'Pod/F-test',
    'Pod/F-test-access',
  ].map((k) => k.replace(/F/g, fullname))

/** renderWebhookConfiguration() options of a release with default values. */
export const defaultWebhook = (release: string) => (ns: string) => ({
  mode: 'service' as const,
  name: `${release}-crd-migrator.crd-migrator.io`,
  service: service({ namespace: ns, name: `${release}-crd-migrator`, port: 443, path: '/validate-crd' }),
  certManagerCertificate: `${ns}/${release}-crd-migrator-serving`,
  migratorUsers: [`system:serviceaccount:${ns}:${release}-crd-migrator`],
})

/** A NetworkPolicyPeer: kube-apiserver as static pods (kubeadm). */
export const KUBE_APISERVER_PODS = {
  namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': 'kube-system' } },
  podSelector: { matchLabels: { component: 'kube-apiserver' } },
}
/** An egress rule for cluster DNS. */
export const DNS_EGRESS = {
  to: [{ namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': 'kube-system' } } }],
  ports: [
    { protocol: 'UDP', port: 53 },
    { protocol: 'TCP', port: 53 },
  ],
}
/** Where the operators' scenario puts its Grafana dashboard (created before the dry run). */
export const DASHBOARD_NAMESPACE = uniqueName('chart-grafana')
/** Every operators' option of issue #18 at once, nothing at its default. */
export const OPS_VALUES = {
  metrics: { serviceMonitor: { enabled: true } },
  networkPolicy: {
    enabled: true,
    apiServerCIDRs: ['10.0.0.0/16', 'fd00:10::/64'],
    apiServerPeers: [KUBE_APISERVER_PODS],
    metricsFrom: [{ namespaceSelector: { matchLabels: { 'kubernetes.io/metadata.name': 'monitoring' } } }],
    egress: { enabled: true, apiServerPorts: [6443], extraRules: [DNS_EGRESS] },
  },
  prometheusRule: {
    enabled: true,
    frozenCrdMinutes: 30,
    certificateExpiryDays: 5,
    refusalsPerMinute: 2,
    labels: { release: 'prometheus' },
    alertLabels: { team: 'platform', severity: 'critical' },
  },
  grafanaDashboard: {
    enabled: true,
    namespace: DASHBOARD_NAMESPACE,
    sidecarLabel: 'dashboards.example.com/grafana',
    sidecarLabelValue: 'yes',
    annotations: { grafana_folder: 'Kubernetes' },
  },
  tests: { enabled: true },
}

/** An explicit stash rule, every field set (docs/migrate-one-crd.md's example, limited to two namespaces). */
export const EXPLICIT_STASH_RULE = {
  group: 'example.com',
  source: {
    group: 'apps',
    version: 'v1',
    resource: 'controllerrevisions',
    labelSelector: 'example.com/stash',
    namespaces: ['team-a', 'team-b'],
    dataPointer: '/data',
  },
  versionLabel: 'example.com/object-version',
  referrers: [
    { group: 'example.com', version: 'v1', resource: 'owners', pointers: ['/spec/revisionName'] },
    { group: '', version: 'v1', resource: 'configmaps', pointers: ['/data/revision', '/data/previous~1revision'] },
  ],
}

export const scenarios: Scenario[] = [
  {
    name: 'default values',
    release: 'crd-migrator',
    values: {},
    webhook: (ns) => ({
      mode: 'service',
      name: 'crd-migrator.crd-migrator.io',
      service: service({ namespace: ns, name: 'crd-migrator', port: 443, path: '/validate-crd' }),
      certManagerCertificate: `${ns}/crd-migrator-serving`,
      migratorUsers: [`system:serviceaccount:${ns}:crd-migrator`],
    }),
    kinds: [
      'ServiceAccount/crd-migrator',
      'ConfigMap/crd-migrator',
      'Secret/crd-migrator-state-key',
      'ClusterRole/crd-migrator',
      'ClusterRole/crd-migrator-accept-changes',
      'ClusterRole/crd-migrator-freeze',
      'ValidatingAdmissionPolicy/crd-migrator-consent',
      'ValidatingAdmissionPolicyBinding/crd-migrator-consent',
      'ClusterRoleBinding/crd-migrator',
      'Role/crd-migrator-leader-election',
      'Role/crd-migrator-NS-events',
      'RoleBinding/crd-migrator-leader-election',
      'RoleBinding/crd-migrator-NS-events',
      'Service/crd-migrator',
      'Deployment/crd-migrator',
      'Pod/crd-migrator-lift-freezes',
      'Certificate/crd-migrator-ca',
      'Certificate/crd-migrator-serving',
      'Issuer/crd-migrator-selfsigned',
      'Issuer/crd-migrator-ca',
      'PodDisruptionBudget/crd-migrator',
      'ValidatingWebhookConfiguration/crd-migrator.crd-migrator.io',
    ],
  },
  {
    name: 'non-default values: own issuer, 3 replicas, managed groups, per-CRD options, ServiceMonitor',
    release: 'mig',
    values: {
      replicaCount: 3,
      logLevel: 'debug',
      image: { repository: 'registry.example.com/platform/crd-migrator', digest: 'sha256:' + 'a'.repeat(64) },
      certManager: {
        issuerRef: { name: 'corp-ca', kind: 'ClusterIssuer', group: 'cert-manager.io' },
        duration: '720h',
        renewBefore: '240h',
      },
      // A CRD group under k8s.io is not one of kube-apiserver's own groups: allowed.
      rbac: { managedGroups: ['example.com', 'stable.example.org', 'gateway.networking.k8s.io'] },
      annotations: { migrating: 'example.com/migrating' },
      identities: { migratorUsers: ['ops-bot'], migratorGroups: ['platform-ops'], breakGlassGroups: ['system:masters', 'oncall'] },
      migrator: {
        selector: 'team=platform,crd-migrator.io/managed=true',
        names: ['gadgets.example.net'],
        concurrency: 8,
        qps: 50.5,
        skipPhases: ['CleanupManagedFields'],
        crds: { 'widgets.example.com': { useStatusSubresource: true, concurrency: 4, qps: 10 } },
      },
      webhook: { timeoutSeconds: 10, port: 10443 },
      service: { port: 8443 },
      metrics: { port: 9090, serviceMonitor: { enabled: true, labels: { release: 'prometheus' } } },
      extraConfig: { migrator: { pageSize: 200 } },
      podAnnotations: { 'example.com/team': 'platform' },
    },
    webhook: (ns) => ({
      mode: 'service',
      name: 'mig-crd-migrator.crd-migrator.io',
      service: service({ namespace: ns, name: 'mig-crd-migrator', port: 8443, path: '/validate-crd' }),
      certManagerCertificate: `${ns}/mig-crd-migrator-serving`,
      annotationKey: 'example.com/migrating',
      timeoutSeconds: 10,
      migratorUsers: [`system:serviceaccount:${ns}:mig-crd-migrator`, 'ops-bot'],
      migratorGroups: ['platform-ops'],
    }),
    kinds: [
      'ServiceAccount/mig-crd-migrator',
      'ConfigMap/mig-crd-migrator',
      'Secret/mig-crd-migrator-state-key',
      'ClusterRole/mig-crd-migrator',
      'ClusterRole/mig-crd-migrator-accept-changes',
      'ClusterRole/mig-crd-migrator-freeze',
      'ValidatingAdmissionPolicy/mig-crd-migrator-consent',
      'ValidatingAdmissionPolicyBinding/mig-crd-migrator-consent',
      'ClusterRoleBinding/mig-crd-migrator',
      'Role/mig-crd-migrator-leader-election',
      'Role/mig-crd-migrator-NS-events',
      'RoleBinding/mig-crd-migrator-leader-election',
      'RoleBinding/mig-crd-migrator-NS-events',
      'Service/mig-crd-migrator',
      'Deployment/mig-crd-migrator',
      'Pod/mig-crd-migrator-lift-freezes',
      'Certificate/mig-crd-migrator-serving',
      'PodDisruptionBudget/mig-crd-migrator',
      'ServiceMonitor/mig-crd-migrator',
      'ValidatingWebhookConfiguration/mig-crd-migrator.crd-migrator.io',
    ],
  },
  {
    name: 'no cert-manager: existing Secret and caBundle, one replica, all groups',
    release: 'plain',
    values: {
      replicaCount: 1,
      certManager: { enabled: false },
      tls: { existingSecret: 'my-webhook-tls' },
      webhook: { caBundle: Buffer.from(caPem).toString('base64') },
      rbac: { allGroups: true },
      serviceAccount: { name: 'migrator' },
      migrator: { stateKey: { existingSecret: 'my-state-key' } },
    },
    webhook: (ns) => ({
      mode: 'service',
      name: 'plain-crd-migrator.crd-migrator.io',
      service: service({ namespace: ns, name: 'plain-crd-migrator', port: 443, path: '/validate-crd' }),
      caBundlePem: caPem,
      migratorUsers: [`system:serviceaccount:${ns}:migrator`],
    }),
    kinds: [
      'ServiceAccount/migrator',
      'ConfigMap/plain-crd-migrator',
      'ClusterRole/plain-crd-migrator',
      'ClusterRole/plain-crd-migrator-accept-changes',
      'ClusterRole/plain-crd-migrator-freeze',
      'ValidatingAdmissionPolicy/plain-crd-migrator-consent',
      'ValidatingAdmissionPolicyBinding/plain-crd-migrator-consent',
      'ClusterRoleBinding/plain-crd-migrator',
      'Role/plain-crd-migrator-leader-election',
      'Role/plain-crd-migrator-NS-events',
      'RoleBinding/plain-crd-migrator-leader-election',
      'RoleBinding/plain-crd-migrator-NS-events',
      'Service/plain-crd-migrator',
      'Deployment/plain-crd-migrator',
      'Pod/plain-crd-migrator-lift-freezes',
      'ValidatingWebhookConfiguration/plain-crd-migrator.crd-migrator.io',
    ],
  },
  {
    // Re-encrypting Secrets after an encryption-at-rest key rotation, and Deployments: KSVM's
    // StorageVersionMigrations are reconciled, their CRD installed, and only the listed
    // built-in resources are granted (a duplicate entry gives one rule).
    name: 'StorageVersionMigrations: their CRD, their RBAC, built-in resources',
    release: 'svm',
    values: {
      storageVersionMigrations: { enabled: true },
      migrator: {
        builtInResources: [
          { group: '', resource: 'secrets' },
          { group: 'apps', resource: 'deployments' },
          { group: '', resource: 'secrets' },
        ],
      },
    },
    webhook: (ns) => ({
      mode: 'service',
      name: 'svm-crd-migrator.crd-migrator.io',
      service: service({ namespace: ns, name: 'svm-crd-migrator', port: 443, path: '/validate-crd' }),
      certManagerCertificate: `${ns}/svm-crd-migrator-serving`,
      migratorUsers: [`system:serviceaccount:${ns}:svm-crd-migrator`],
    }),
    kinds: [
      'CustomResourceDefinition/storageversionmigrations.migration.k8s.io',
      'ServiceAccount/svm-crd-migrator',
      'ConfigMap/svm-crd-migrator',
      'Secret/svm-crd-migrator-state-key',
      'ClusterRole/svm-crd-migrator',
      'ClusterRole/svm-crd-migrator-accept-changes',
      'ClusterRole/svm-crd-migrator-freeze',
      'ValidatingAdmissionPolicy/svm-crd-migrator-consent',
      'ValidatingAdmissionPolicyBinding/svm-crd-migrator-consent',
      'ClusterRoleBinding/svm-crd-migrator',
      'Role/svm-crd-migrator-leader-election',
      'Role/svm-crd-migrator-NS-events',
      'RoleBinding/svm-crd-migrator-leader-election',
      'RoleBinding/svm-crd-migrator-NS-events',
      'Service/svm-crd-migrator',
      'Deployment/svm-crd-migrator',
      'Pod/svm-crd-migrator-lift-freezes',
      'Certificate/svm-crd-migrator-ca',
      'Certificate/svm-crd-migrator-serving',
      'Issuer/svm-crd-migrator-selfsigned',
      'Issuer/svm-crd-migrator-ca',
      'PodDisruptionBudget/svm-crd-migrator',
      'ValidatingWebhookConfiguration/svm-crd-migrator.crd-migrator.io',
    ],
  },
  {
    // Webhook only: no RBAC for the ServiceAccount, no token, no state key. The groups, the built-in resources, the
    // StorageVersionMigrations and the token setting are still asked for, and still not
    // granted. KSVM's CRD is an API, not a grant: it is still installed.
    name: 'webhook only (migrator.enabled=false): no RBAC, no token, no state key',
    release: 'wh',
    values: {
      migrator: { enabled: false, names: ['gadgets.example.net'], builtInResources: [{ group: '', resource: 'secrets' }] },
      rbac: { managedGroups: ['example.com'] },
      serviceAccount: { automountServiceAccountToken: true },
      storageVersionMigrations: { enabled: true },
      // The webhook alone calls nobody: egress enabled leaves no rule at all.
      networkPolicy: { enabled: true, apiServerPeers: [KUBE_APISERVER_PODS], egress: { enabled: true } },
      tests: { enabled: true },
    },
    webhook: (ns) => ({
      mode: 'service',
      name: 'wh-crd-migrator.crd-migrator.io',
      service: service({ namespace: ns, name: 'wh-crd-migrator', port: 443, path: '/validate-crd' }),
      certManagerCertificate: `${ns}/wh-crd-migrator-serving`,
      migratorUsers: [`system:serviceaccount:${ns}:wh-crd-migrator`],
    }),
    kinds: [
      'CustomResourceDefinition/storageversionmigrations.migration.k8s.io',
      'ServiceAccount/wh-crd-migrator',
      // People's, not the ServiceAccount's: who may freeze (the webhook asks RBAC through the API server).
      'ClusterRole/wh-crd-migrator-freeze',
      'ConfigMap/wh-crd-migrator',
      'Service/wh-crd-migrator',
      'Deployment/wh-crd-migrator',
      'Pod/wh-crd-migrator-lift-freezes',
      'Certificate/wh-crd-migrator-ca',
      'Certificate/wh-crd-migrator-serving',
      'Issuer/wh-crd-migrator-selfsigned',
      'Issuer/wh-crd-migrator-ca',
      'PodDisruptionBudget/wh-crd-migrator',
      'ValidatingWebhookConfiguration/wh-crd-migrator.crd-migrator.io',
      'NetworkPolicy/wh-crd-migrator',
      ...testKinds('wh-crd-migrator'),
    ],
  },
  {
    name: "operators' options: NetworkPolicy (ingress and egress), PrometheusRule, Grafana dashboard elsewhere, helm test",
    release: 'ops',
    values: OPS_VALUES,
    webhook: defaultWebhook('ops'),
    kinds: [
      ...defaultKinds('ops'),
      'ServiceMonitor/ops-crd-migrator',
      'NetworkPolicy/ops-crd-migrator',
      'PrometheusRule/ops-crd-migrator',
      'ConfigMap/ops-crd-migrator-dashboard',
      ...testKinds('ops-crd-migrator'),
    ],
  },
  {
    // For API servers that cannot reach pod IPs: the pods on the node's network, on ports
    // of the operator's choosing, which the Service (by port name) and the probes follow.
    name: "hostNetwork: the node's network and ports, ClusterFirstWithHostNet, a privileged namespace",
    release: 'hn',
    values: { hostNetwork: true, webhook: { port: 19443 }, metrics: { port: 19080 } },
    podSecurity: 'privileged',
    webhook: defaultWebhook('hn'),
    kinds: defaultKinds('hn'),
  },
  {
    // KubeVirt's instancetype revisions: the preset stands for its source and referrers.
    name: 'stash preset kubevirt-instancetypes: RBAC on ControllerRevisions and VirtualMachines',
    release: 'kv',
    values: { migrator: { stashPresets: ['kubevirt-instancetypes'] } },
    webhook: defaultWebhook('kv'),
    kinds: defaultKinds('kv'),
    stashRules: [stashSourceRule('apps', 'controllerrevisions'), stashReferrerRule('kubevirt.io', 'virtualmachines')],
  },
  {
    // An explicit rule, then the preset with its source narrowed to one namespace: the
    // preset's rules are the explicit rule's ControllerRevisions again (dropped) and
    // VirtualMachines. namespaces narrow the listing, not the ClusterRole.
    name: 'explicit stash rules: RBAC on exactly their sources and referrers',
    release: 'stash',
    values: {
      migrator: {
        stashes: [
          EXPLICIT_STASH_RULE,
          {
            preset: 'kubevirt-instancetypes',
            source: { group: 'apps', version: 'v1', resource: 'controllerrevisions', namespaces: ['vms'] },
          },
        ],
      },
    },
    webhook: defaultWebhook('stash'),
    kinds: defaultKinds('stash'),
    stashRules: [
      stashSourceRule('apps', 'controllerrevisions'),
      stashReferrerRule('example.com', 'owners'),
      stashReferrerRule('', 'configmaps'),
      stashReferrerRule('kubevirt.io', 'virtualmachines'),
    ],
  },
]

/** The chart's migrator.enabled for a scenario's values (default true). */
export const migratorEnabled = (values: Record<string, any>) => values['migrator']?.enabled !== false
/** The chart's storageVersionMigrations.enabled for a scenario's values (default false). */
export const svmEnabled = (values: Record<string, any>) => values['storageVersionMigrations']?.enabled === true

export const SVM_CRD = 'storageversionmigrations.migration.k8s.io'
/** The ClusterRole rules storageVersionMigrations.enabled adds, after those of built-in resources. */
export const SVM_RULES: Rule[] = [
  { apiGroups: ['migration.k8s.io'], resources: ['storageversionmigrations'], verbs: ['get', 'list', 'watch', 'patch'] },
  { apiGroups: ['migration.k8s.io'], resources: ['storageversionmigrations/status'], verbs: ['get', 'patch', 'update'] },
]

/**
 * The ClusterRole's first rules, in every render with the migrator (migrator.engine own):
 * CRDs, their status, and kube-apiserver's own StorageVersionMigrations, read only (one
 * migrator at a time); engine builtin adds patch, create and delete on those.
 */
export const BASE_RULES: Rule[] = [
  { apiGroups: ['apiextensions.k8s.io'], resources: ['customresourcedefinitions'], verbs: ['get', 'list', 'watch', 'patch'] },
  { apiGroups: ['apiextensions.k8s.io'], resources: ['customresourcedefinitions/status'], verbs: ['patch'] },
  { apiGroups: ['storagemigration.k8s.io'], resources: ['storageversionmigrations'], verbs: ['get', 'list'] },
]

/** Where the chart mounts the state-key Secret (config migrator.stateKeyFile is <dir>/key). */
export const STATE_KEY_DIR = '/var/run/crd-migrator/state-key'

/** The state-key Secret a scenario's pods mount: the user's, or <fullname>-state-key. */
export function stateKeySecretName(scenario: Scenario, manifests: Manifest[]): string {
  return scenario.values['migrator']?.stateKey?.existingSecret ?? `${one(manifests, 'Deployment').metadata.name}-state-key`
}

/** API Priority and Fairness objects (templates/flowschema.yaml, apiPriorityAndFairness.*), checked by kind only here. */
export const APF_KINDS = ['FlowSchema', 'PriorityLevelConfiguration']
export const chartDefaults = parse(await readFile(join(chartDir, 'values.yaml'), 'utf8')) as Record<string, any>
/** Whether a render with `values` has API Priority and Fairness objects: where the chart has them, enabled, with the migrator. */
export function apfExpected(values: Record<string, any>): boolean {
  const enabled = values['apiPriorityAndFairness']?.enabled ?? chartDefaults['apiPriorityAndFairness']?.enabled ?? false
  return existsSync(join(chartDir, 'templates', 'flowschema.yaml')) && enabled === true && migratorEnabled(values)
}

// --- the `helm test` hook ------------------------------------------------------------------

export const HELM_TEST_SCRIPT_FILE = join(chartDir, 'files', 'helm-test.mjs')
export const HELM_TEST_SCRIPT = await readFile(HELM_TEST_SCRIPT_FILE, 'utf8')

export interface TestChecks {
  webhook: { name: string; crd: string; annotation: string }
  subject: { user: string }
  access: Array<{ allowed: boolean; what: string; attributes: Record<string, string> }>
}

/** The hook's checks.json, from its ConfigMap. */
export function testChecksOf(hooks: Manifest[]): TestChecks {
  return JSON.parse((one(hooks, 'ConfigMap')['data'] as Record<string, string>)['checks.json']!) as TestChecks
}

/**
 * The hook's objects: hooks all, the Pods last and kept, the others gone once it passes; the
 * narrowest RBAC: the webhook Pod's ServiceAccount may patch its probe CRD, nothing else, and
 * the access Pod runs as the migrator's ServiceAccount (SelfSubjectAccessReviews need no grant).
 */
export function checkTestHook(t: T, rendered: Manifest[], ns: string): void {
  const hooks = rendered.filter(isTestHook)
  const installed = rendered.filter((m) => !isTestHook(m))
  const fullname = one(installed, 'Deployment').metadata.name
  t.same(
    ids(hooks).sort(),
    testKinds(fullname)
      .map((k) => k.replace('NS', ns))
      .sort(),
    'the hook objects',
  )
  const pod = one(hooks, 'Pod', `${fullname}-test`)
  const accessPod = one(hooks, 'Pod', `${fullname}-test-access`)
  const weight = (m: Manifest) => Number(m.metadata.annotations?.['helm.sh/hook-weight'] ?? '0')
  for (const m of hooks.filter((m) => m.kind !== 'Pod')) {
    t.ok(weight(m) < weight(pod) && weight(m) < weight(accessPod), `${m.kind} is created before the Pods`)
    t.equal(
      m.metadata.annotations?.['helm.sh/hook-delete-policy'],
      'before-hook-creation,hook-succeeded',
      `${m.kind}: gone once the test passes`,
    )
  }
  t.equal(pod.metadata.annotations?.['helm.sh/hook-delete-policy'], 'before-hook-creation', 'the Pod stays, for its log')
  const { metadata: accessMeta, spec: accessSpec } = accessPod as Manifest & { spec: Record<string, any> }
  t.equal(accessMeta.annotations?.['helm.sh/hook-delete-policy'], 'before-hook-creation', 'the access Pod stays too')
  t.same(
    { ...accessSpec, serviceAccountName: undefined, containers: undefined },
    { ...(pod['spec'] as Record<string, any>), serviceAccountName: undefined, containers: undefined },
    'the access Pod is the same Pod',
  )
  t.same(
    { ...accessSpec['containers'][0], env: undefined },
    { ...(pod['spec'] as Record<string, any>)['containers'][0], env: undefined },
    'with the same container',
  )
  t.same((pod['spec'] as Record<string, any>)['containers'][0].env, [{ name: 'CRD_MIGRATOR_TEST_PART', value: 'webhook' }])
  t.same(accessSpec['containers'][0].env, [{ name: 'CRD_MIGRATOR_TEST_PART', value: 'access' }])
  t.equal(
    accessSpec['serviceAccountName'],
    one(installed, 'ServiceAccount').metadata.name,
    "the access Pod runs as the migrator's ServiceAccount: it asks SelfSubjectAccessReviews",
  )
  const spec = pod['spec'] as Record<string, any>
  const server = podSpec(installed)
  const container = spec['containers'][0]
  t.equal(container.image, server['containers'][0].image, "the chart's own image")
  t.same(container.command, ['/nodejs/bin/node', '/etc/crd-migrator-test/helm-test.mjs'], 'runs files/helm-test.mjs')
  t.same(container.securityContext, server['containers'][0].securityContext, "the server's container security context")
  t.same(spec['securityContext'], server['securityContext'], "the server's pod security context")
  t.equal(spec['restartPolicy'], 'Never')
  t.equal(spec['serviceAccountName'], `${fullname}-test`, "its own ServiceAccount, not the migrator's")
  t.equal(one(hooks, 'ServiceAccount').metadata.name, `${fullname}-test`)
  const probe = one(hooks, 'CustomResourceDefinition')
  t.equal(probe.metadata.name, `probes.${fullname}.${ns}.helm-test.crd-migrator.io`, 'a probe CRD of its own, per release')
  t.same(
    rulesOf(one(hooks, 'ClusterRole')),
    [
      {
        apiGroups: ['apiextensions.k8s.io'],
        resources: ['customresourcedefinitions'],
        resourceNames: [probe.metadata.name],
        verbs: ['patch'],
      },
    ],
    'it may patch its probe CRD, nothing more (no SubjectAccessReviews: it cannot ask what anyone may do)',
  )
  t.same(one(hooks, 'ClusterRoleBinding')['subjects'], [{ kind: 'ServiceAccount', name: `${fullname}-test`, namespace: ns }])
  t.equal(
    (one(hooks, 'ConfigMap')['data'] as Record<string, string>)['helm-test.mjs'],
    HELM_TEST_SCRIPT,
    'the script is files/helm-test.mjs',
  )
  const checks = testChecksOf(hooks)
  t.same(checks.webhook, { name: WEBHOOK_NAME, crd: probe.metadata.name, annotation: 'crd-migrator.io/helm-test' }, 'the webhook check')
  t.equal(
    checks.subject.user,
    `system:serviceaccount:${ns}:${one(installed, 'ServiceAccount').metadata.name}`,
    "the migrator's ServiceAccount",
  )
  t.ok(
    checks.access.some((c) => c.allowed === false),
    'it checks what the migrator may not do, too',
  )
}
