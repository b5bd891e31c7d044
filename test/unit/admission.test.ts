import t from 'tap'
import { DEFAULT_MIGRATING_ANNOTATION, DEFAULT_MIGRATOR_USERS } from '../../src/config/annotations.js'
import {
  DEFAULT_ADMISSION_POLICY,
  type AdmissionInput,
  type AdmissionOperation,
  type AdmissionPolicy,
  type DecisionReason,
} from '../../src/webhook/admission.js'
import { decideAdmission } from '../../src/webhook/rules.js'

const KEY = DEFAULT_MIGRATING_ANNOTATION
const NAME = 'widgets.example.com'
const FROZEN = { [KEY]: 'true' }

const policy: AdmissionPolicy = { ...DEFAULT_ADMISSION_POLICY, migratorGroups: ['crd-migrators'] }

const alice = { username: 'alice', groups: ['system:authenticated'] }
// A real ServiceAccount token carries a JTI credential id; a client certificate with the same name does not.
const migratorSa = {
  username: DEFAULT_MIGRATOR_USERS[0]!,
  groups: ['system:serviceaccounts'],
  extra: { 'authentication.kubernetes.io/credential-id': ['JTI=6f0c1b1e-1c53-4ad4-9a51-0b9b2f1f9e3a'] },
}
const certNamedLikeSa = {
  username: DEFAULT_MIGRATOR_USERS[0]!,
  groups: ['system:serviceaccounts'],
  extra: { 'authentication.kubernetes.io/credential-id': ['X509SHA256=9a4a60dc'] },
}
const saNameNoProof = { username: DEFAULT_MIGRATOR_USERS[0]!, groups: ['system:serviceaccounts'] }
const apiserver = { username: 'system:apiserver', groups: ['system:authenticated'] }
const migratorGroupMember = { username: 'bob', groups: ['system:authenticated', 'crd-migrators'] }
const admin = { username: 'kubernetes-admin', groups: ['system:masters', 'system:authenticated'] }
const anonymous = { username: '', groups: [] }

type Versions = Array<[name: string, storage: boolean]> | 'missing' | 'not-an-array'

function crd(
  options: {
    annotations?: Record<string, string>
    versions?: Versions
    shortNames?: string[]
    name?: string
    /** Versions with `served: false`. */
    unserved?: string[]
    conversion?: unknown
  } = {},
) {
  const versions = options.versions ?? [
    ['v1alpha1', false],
    ['v1', true],
  ]
  const spec: Record<string, unknown> = {
    group: 'example.com',
    names: { plural: 'widgets', kind: 'Widget', shortNames: options.shortNames ?? ['wd'] },
    scope: 'Namespaced',
  }
  if (versions === 'not-an-array') spec['versions'] = { v1: { storage: true } }
  else if (versions !== 'missing') {
    spec['versions'] = versions.map(([name, storage]) => ({
      name,
      served: !(options.unserved ?? []).includes(name),
      storage,
      schema: { openAPIV3Schema: { type: 'object' } },
    }))
  }
  if (options.conversion !== undefined) spec['conversion'] = options.conversion
  const metadata: Record<string, unknown> = { name: options.name ?? NAME, resourceVersion: '42' }
  if (options.annotations) metadata['annotations'] = options.annotations
  return { apiVersion: 'apiextensions.k8s.io/v1', kind: 'CustomResourceDefinition', metadata, spec }
}

function withStored(object: ReturnType<typeof crd>, storedVersions: string[]) {
  return { ...object, status: { storedVersions } }
}

/** The condition kube-controller-manager's built-in migrator writes on the CRD. */
function withCondition(object: object, status: 'True' | 'False') {
  const condition = { type: 'StorageMigrating', status, reason: status === 'True' ? 'MigrationRunning' : 'MigrationSucceeded' }
  const previous = (object as { status?: Record<string, unknown> }).status ?? {}
  return { ...object, status: { ...previous, conditions: [condition] } }
}

/** The CRD with a StorageMigrating condition of this status (and message), or none. */
function withConditionMessage(object: object, status: 'True' | 'False', message: string) {
  const condition = { type: 'StorageMigrating', status, reason: 'MigrationRunning', message }
  const previous = (object as { status?: Record<string, unknown> }).status ?? {}
  return { ...object, status: { ...previous, conditions: [condition] } }
}

/** kube-controller-manager without --use-service-account-credentials: its own user. */
const kcm = { username: 'system:kube-controller-manager', groups: ['system:authenticated'] }
/** A client certificate named like the controller's ServiceAccount: not kube-controller-manager. */
const certNamedLikeKcmSa = {
  username: 'system:serviceaccount:kube-system:storage-version-migrator-controller',
  groups: ['system:serviceaccounts', 'system:authenticated'],
  extra: { 'authentication.kubernetes.io/credential-id': ['X509SHA256=77aa'] },
}

/** kube-controller-manager's built-in migrator, with --use-service-account-credentials. */
const kcmSvm = {
  username: 'system:serviceaccount:kube-system:storage-version-migrator-controller',
  groups: ['system:serviceaccounts', 'system:serviceaccounts:kube-system', 'system:authenticated'],
  extra: { 'authentication.kubernetes.io/credential-id': ['JTI=0d6b1a3c'] },
}

function deepValue(depth: number): unknown {
  let deep: unknown = { strategy: 'None' }
  for (let i = 0; i < depth; i++) deep = { webhook: deep }
  return deep
}

interface Row {
  name: string
  operation?: AdmissionOperation
  subResource?: string
  user?: AdmissionInput['userInfo']
  old?: unknown
  new?: unknown
  requestName?: string | null
  /** The review came through the entry for users RBAC allows to freeze the CRD. */
  freezeAllowed?: boolean
  policy?: AdmissionPolicy
  allowed: boolean
  reason: DecisionReason
  /** For denials: substrings of the message. For break-glass: substrings of the warning. */
  includes?: string[]
  code?: number
}

const frozenV1alpha1 = crd({
  annotations: FROZEN,
  versions: [
    ['v1alpha1', true],
    ['v1', false],
  ],
})
const frozenV1 = crd({
  annotations: FROZEN,
  versions: [
    ['v1alpha1', false],
    ['v1', true],
  ],
})

const rows: Row[] = [
  // --- the storage freeze ---------------------------------------------------------
  {
    name: 'frozen: storage flag flipped v1alpha1 -> v1',
    old: frozenV1alpha1,
    new: frozenV1,
    allowed: false,
    reason: 'storage-version-frozen',
    includes: [
      NAME,
      'from v1alpha1 to v1',
      "kubectl get crd widgets.example.com -o jsonpath='{.metadata.annotations}'",
      'crd-migrator.io/',
      'Wait for the migration',
    ],
    code: 403,
  },
  {
    name: 'frozen: storage moved to a version added in the same update',
    old: crd({ annotations: FROZEN, versions: [['v1', true]] }),
    new: crd({
      annotations: FROZEN,
      versions: [
        ['v1', false],
        ['v2', true],
      ],
    }),
    allowed: false,
    reason: 'storage-version-frozen',
    includes: [NAME, 'from v1 to v2'],
  },
  {
    name: 'frozen: a second version also marked storage',
    old: frozenV1,
    new: crd({
      annotations: FROZEN,
      versions: [
        ['v1alpha1', true],
        ['v1', true],
      ],
    }),
    allowed: false,
    reason: 'storage-version-frozen',
    includes: [NAME, 'from v1 to v1, v1alpha1'],
  },
  {
    name: 'frozen: the storage version removed from spec.versions',
    old: frozenV1,
    new: crd({ annotations: FROZEN, versions: [['v1alpha1', false]] }),
    allowed: false,
    reason: 'storage-version-frozen',
    includes: [NAME, 'from v1 to (none)'],
  },
  {
    name: 'frozen: storage flag cleared on the only storage version',
    old: frozenV1,
    new: crd({
      annotations: FROZEN,
      versions: [
        ['v1alpha1', false],
        ['v1', false],
      ],
    }),
    allowed: false,
    reason: 'storage-version-frozen',
    includes: [NAME, 'v1', '(none)'],
  },
  {
    name: 'frozen: storage version added where there was none',
    old: crd({ annotations: FROZEN, versions: 'missing' }),
    new: frozenV1,
    allowed: false,
    reason: 'storage-version-frozen',
    includes: [NAME, 'from (none) to v1'],
  },
  {
    name: 'frozen: spec.versions dropped entirely',
    old: frozenV1,
    new: crd({ annotations: FROZEN, versions: 'missing' }),
    allowed: false,
    reason: 'storage-version-frozen',
    includes: [NAME, 'from v1 to (none)'],
  },
  {
    name: 'frozen: versions reordered, same storage version',
    old: frozenV1,
    new: crd({
      annotations: FROZEN,
      versions: [
        ['v1', true],
        ['v1alpha1', false],
      ],
    }),
    allowed: true,
    reason: 'allowed',
  },
  {
    name: 'frozen: a new non-storage version added',
    old: frozenV1,
    new: crd({
      annotations: FROZEN,
      versions: [
        ['v1alpha1', false],
        ['v1', true],
        ['v2', false],
      ],
    }),
    allowed: true,
    reason: 'allowed',
  },
  {
    name: 'frozen: an old non-storage version removed',
    old: frozenV1,
    new: crd({ annotations: FROZEN, versions: [['v1', true]] }),
    allowed: true,
    reason: 'allowed',
  },
  {
    name: 'frozen: unrelated spec field changed',
    old: frozenV1,
    new: crd({ annotations: FROZEN, shortNames: ['wd', 'wdg'] }),
    allowed: true,
    reason: 'allowed',
  },
  {
    name: 'frozen: another annotation changed',
    old: frozenV1,
    new: crd({ annotations: { ...FROZEN, 'example.com/owner': 'team-a' } }),
    allowed: true,
    reason: 'allowed',
  },
  {
    name: 'frozen: a crd-migrator.io state annotation set by someone else',
    old: frozenV1,
    new: crd({ annotations: { ...FROZEN, 'crd-migrator.io/phase': 'Migrating' } }),
    allowed: false,
    reason: 'annotation-guarded',
    includes: ['crd-migrator.io/phase', 'user "alice"', 'while the CRD is frozen'],
  },
  {
    name: 'frozen: both sides without spec.versions (nothing changed)',
    old: crd({ annotations: FROZEN, versions: 'missing' }),
    new: crd({ annotations: FROZEN, versions: 'missing', shortNames: ['x'] }),
    allowed: true,
    reason: 'allowed',
  },
  {
    name: 'frozen: spec.versions not an array fails closed',
    old: frozenV1,
    new: crd({ annotations: FROZEN, versions: 'not-an-array' }),
    allowed: false,
    reason: 'malformed-object',
    includes: [NAME, 'spec.versions that is not an array'],
    code: 400,
  },
  {
    name: 'frozen: the migrator identity may not flip storage either',
    user: migratorSa,
    old: frozenV1alpha1,
    new: frozenV1,
    allowed: false,
    reason: 'storage-version-frozen',
    includes: [NAME, 'v1alpha1', 'v1'],
  },
  {
    name: 'frozen: break-glass may not flip storage either (KEP-2855: the freeze holds for everyone)',
    user: admin,
    old: frozenV1alpha1,
    new: frozenV1,
    allowed: false,
    reason: 'storage-version-frozen',
    includes: ['for any user', 'break-glass groups (system:masters)', `kubectl annotate crd ${NAME} ${KEY}-`, 'in a request of its own'],
    code: 403,
  },
  {
    name: 'frozen: break-glass removes the annotation and flips storage in one request',
    user: admin,
    old: frozenV1alpha1,
    new: crd({
      versions: [
        ['v1alpha1', false],
        ['v1', true],
      ],
    }),
    allowed: false,
    reason: 'storage-version-frozen',
    includes: ['from v1alpha1 to v1', 'first removes the annotation'],
  },
  // --- not frozen -------------------------------------------------------------------
  {
    name: 'no annotation: storage flip allowed',
    old: crd({
      versions: [
        ['v1alpha1', true],
        ['v1', false],
      ],
    }),
    new: crd({
      versions: [
        ['v1alpha1', false],
        ['v1', true],
      ],
    }),
    allowed: true,
    reason: 'allowed',
  },
  {
    name: 'annotation value "false" is not frozen: storage flip allowed',
    old: crd({
      annotations: { [KEY]: 'false' },
      versions: [
        ['v1alpha1', true],
        ['v1', false],
      ],
    }),
    new: crd({ annotations: { [KEY]: 'false' } }),
    allowed: true,
    reason: 'allowed',
  },
  {
    name: 'annotation value "True" is not the migrating value: storage flip allowed',
    old: crd({
      annotations: { [KEY]: 'True' },
      versions: [
        ['v1alpha1', true],
        ['v1', false],
      ],
    }),
    new: crd({ annotations: { [KEY]: 'True' } }),
    allowed: true,
    reason: 'allowed',
  },
  {
    name: 'no annotation: spec.versions missing on both sides',
    old: crd({ versions: 'missing' }),
    new: crd({ versions: 'missing' }),
    allowed: true,
    reason: 'allowed',
  },
  // --- the guard on the annotation ----------------------------------------------------
  {
    name: 'random user sets the annotation',
    old: crd(),
    new: crd({ annotations: FROZEN }),
    allowed: false,
    reason: 'annotation-guarded',
    includes: [NAME, KEY, 'user "alice"', 'set it to "true"', DEFAULT_MIGRATOR_USERS[0]!, 'group crd-migrators', 'system:masters'],
    code: 403,
  },
  {
    name: 'random user removes the annotation',
    old: frozenV1,
    new: crd(),
    allowed: false,
    reason: 'annotation-guarded',
    includes: [NAME, 'remove it (was "true")', 'system:masters'],
  },
  {
    name: 'random user changes "true" to "false"',
    old: frozenV1,
    new: crd({ annotations: { [KEY]: 'false' } }),
    allowed: false,
    reason: 'annotation-guarded',
    includes: [NAME, 'change it from "true" to "false"'],
  },
  {
    name: 'random user changes "false" to "true"',
    old: crd({ annotations: { [KEY]: 'false' } }),
    new: frozenV1,
    allowed: false,
    reason: 'annotation-guarded',
  },
  {
    name: 'random user sets the annotation to a non-migrating value (still guarded)',
    old: crd(),
    new: crd({ annotations: { [KEY]: 'no' } }),
    allowed: false,
    reason: 'annotation-guarded',
  },
  {
    name: 'anonymous user sets the annotation',
    user: anonymous,
    old: crd(),
    new: crd({ annotations: FROZEN }),
    allowed: false,
    reason: 'annotation-guarded',
    includes: ['anonymous user'],
  },
  {
    name: 'random user removes the annotation and flips storage: both reported',
    old: frozenV1alpha1,
    new: crd({
      versions: [
        ['v1alpha1', false],
        ['v1', true],
      ],
    }),
    allowed: false,
    reason: 'storage-version-frozen',
    includes: ['from v1alpha1 to v1', 'Also:', 'remove it'],
  },
  { name: 'migrator user sets the annotation', user: migratorSa, old: crd(), new: frozenV1, allowed: true, reason: 'allowed' },
  { name: 'migrator user removes the annotation', user: migratorSa, old: frozenV1, new: crd(), allowed: true, reason: 'allowed' },
  {
    name: 'migrator user changes the annotation value',
    user: migratorSa,
    old: frozenV1,
    new: crd({ annotations: { [KEY]: 'false' } }),
    allowed: true,
    reason: 'allowed',
  },
  {
    name: 'migrator group member sets the annotation',
    user: migratorGroupMember,
    old: crd(),
    new: frozenV1,
    allowed: true,
    reason: 'allowed',
  },
  {
    name: 'migrator group member removes the annotation',
    user: migratorGroupMember,
    old: frozenV1,
    new: crd(),
    allowed: true,
    reason: 'allowed',
  },
  {
    name: 'break-glass removes the annotation (override)',
    user: admin,
    old: frozenV1,
    new: crd(),
    allowed: true,
    reason: 'break-glass-override',
    includes: ['break-glass override', `${KEY} removed`],
  },
  {
    name: 'migrator removes the annotation while flipping storage: the freeze still holds',
    user: migratorSa,
    old: frozenV1alpha1,
    new: crd({
      versions: [
        ['v1alpha1', false],
        ['v1', true],
      ],
    }),
    allowed: false,
    reason: 'storage-version-frozen',
  },
  {
    name: 'custom annotation key: the default key means nothing',
    policy: { ...policy, migratingAnnotation: 'example.com/frozen' },
    old: crd({
      annotations: FROZEN,
      versions: [
        ['v1alpha1', true],
        ['v1', false],
      ],
    }),
    new: crd({ annotations: FROZEN }),
    allowed: true,
    reason: 'allowed',
  },
  {
    name: 'custom annotation key: frozen by it',
    policy: { ...policy, migratingAnnotation: 'example.com/frozen', migratingValue: 'yes' },
    old: crd({
      annotations: { 'example.com/frozen': 'yes' },
      versions: [
        ['v1alpha1', true],
        ['v1', false],
      ],
    }),
    new: crd({ annotations: { 'example.com/frozen': 'yes' } }),
    allowed: false,
    reason: 'storage-version-frozen',
    includes: ['example.com/frozen="yes"', 'v1alpha1', 'v1'],
  },
  {
    name: 'no migrator identities configured: the message says so',
    policy: { ...policy, migratorUsers: [], migratorGroups: [], breakGlassGroups: [] },
    old: crd(),
    new: frozenV1,
    allowed: false,
    reason: 'annotation-guarded',
    includes: ['no identity configured', 'break-glass groups (none configured)'],
  },
  // --- authority by RBAC (issue 43): verb freeze on the CRD, asked by the API server ------
  {
    name: 'RBAC allows freeze: sets the annotation (override, warned as such)',
    freezeAllowed: true,
    old: crd(),
    new: frozenV1,
    allowed: true,
    reason: 'break-glass-override',
    includes: [
      `break-glass override by user "alice" (RBAC allows verb "freeze" on customresourcedefinitions.apiextensions.k8s.io "${NAME}")`,
      `${KEY} set on CRD ${NAME}`,
    ],
  },
  {
    name: 'RBAC allows freeze: removes the annotation (override)',
    freezeAllowed: true,
    old: frozenV1,
    new: crd(),
    allowed: true,
    reason: 'break-glass-override',
    includes: ['RBAC allows verb "freeze"', `${KEY} removed`],
  },
  {
    name: 'RBAC allows freeze: writes the state annotations under the freeze (override)',
    freezeAllowed: true,
    old: frozenV1,
    new: crd({ annotations: { ...FROZEN, 'crd-migrator.io/progress': '10/20' } }),
    allowed: true,
    reason: 'break-glass-override',
    includes: ['crd-migrator.io/progress'],
  },
  {
    name: 'RBAC allows freeze: narrows storedVersions through /status (override)',
    freezeAllowed: true,
    subResource: 'status',
    old: withStored(frozenV1, ['v1alpha1', 'v1']),
    new: withStored(frozenV1, ['v1']),
    allowed: true,
    reason: 'break-glass-override',
  },
  {
    name: 'RBAC allows freeze, no break-glass groups configured: still allowed (RBAC does not depend on the fallback)',
    freezeAllowed: true,
    policy: { ...policy, breakGlassGroups: [] },
    old: crd(),
    new: frozenV1,
    allowed: true,
    reason: 'break-glass-override',
  },
  {
    name: 'RBAC allows freeze: may not flip storage on a frozen CRD',
    freezeAllowed: true,
    old: frozenV1alpha1,
    new: frozenV1,
    allowed: false,
    reason: 'storage-version-frozen',
    includes: ['for any user'],
  },
  {
    name: 'RBAC allows freeze: may not delete a frozen CRD',
    freezeAllowed: true,
    operation: 'DELETE',
    old: frozenV1,
    allowed: false,
    reason: 'delete-frozen',
  },
  {
    name: 'RBAC allows freeze: does not override a malformed review',
    freezeAllowed: true,
    new: frozenV1,
    allowed: false,
    reason: 'malformed-object',
  },
  {
    name: 'system:masters: the warning names no RBAC permission (the fixed group)',
    user: admin,
    old: crd(),
    new: frozenV1,
    allowed: true,
    reason: 'break-glass-override',
    includes: [`break-glass override by user "kubernetes-admin": ${KEY} set`],
  },
  {
    name: 'without the permission: the refusal names the rule and the permission to grant',
    old: crd(),
    new: frozenV1,
    allowed: false,
    reason: 'annotation-guarded',
    code: 403,
    includes: [
      '(crd-migrator webhook rule annotation-guarded.)',
      `grant it verb "freeze" on customresourcedefinitions.apiextensions.k8s.io "${NAME}" with RBAC`,
      'kubectl create clusterrolebinding <name> --clusterrole=<fullname>-freeze --user=alice',
      'system:masters is not needed',
      'cluster-admin holds it',
    ],
  },
  {
    name: 'without the permission: status.storedVersions refusal names its rule too',
    subResource: 'status',
    old: withStored(frozenV1, ['v1alpha1', 'v1']),
    new: withStored(frozenV1, ['v1']),
    allowed: false,
    reason: 'stored-versions-frozen',
    includes: ['(crd-migrator webhook rule stored-versions-frozen.)', '--clusterrole=<fullname>-freeze'],
  },
  // --- CREATE -----------------------------------------------------------------------
  { name: 'CREATE without the annotation', operation: 'CREATE', old: null, new: crd(), allowed: true, reason: 'allowed' },
  {
    name: 'CREATE carrying the annotation by a random user',
    operation: 'CREATE',
    old: null,
    new: frozenV1,
    allowed: false,
    reason: 'annotation-guarded',
    includes: [NAME, 'set it to "true"'],
  },
  {
    name: 'CREATE carrying the annotation by the migrator',
    operation: 'CREATE',
    user: migratorSa,
    new: frozenV1,
    allowed: true,
    reason: 'allowed',
  },
  {
    name: 'CREATE carrying the annotation by break-glass',
    operation: 'CREATE',
    user: admin,
    new: frozenV1,
    allowed: true,
    reason: 'break-glass-override',
  },
  // --- DELETE -----------------------------------------------------------------------
  { name: 'DELETE of an unannotated CRD', operation: 'DELETE', old: crd(), new: null, allowed: true, reason: 'allowed' },
  {
    name: 'DELETE of a CRD with a non-migrating annotation value',
    operation: 'DELETE',
    old: crd({ annotations: { [KEY]: 'false' } }),
    allowed: true,
    reason: 'allowed',
  },
  {
    name: 'DELETE of a frozen CRD by a random user',
    operation: 'DELETE',
    old: frozenV1,
    new: null,
    allowed: false,
    reason: 'delete-frozen',
    includes: [NAME, 'delete all of its custom resources', 'system:masters'],
    code: 403,
  },
  {
    name: 'DELETE of a frozen CRD by the migrator',
    operation: 'DELETE',
    user: migratorSa,
    old: frozenV1,
    allowed: false,
    reason: 'delete-frozen',
  },
  {
    name: 'DELETE of a frozen CRD by break-glass',
    operation: 'DELETE',
    user: admin,
    old: frozenV1,
    allowed: false,
    reason: 'delete-frozen',
    includes: ['nobody may', `kubectl annotate crd ${NAME} ${KEY}-`],
  },
  // --- malformed reviews fail closed -----------------------------------------------------
  {
    name: 'UPDATE without oldObject',
    new: frozenV1,
    allowed: false,
    reason: 'malformed-object',
    includes: [NAME, 'request.oldObject', 'got none', 'fail closed'],
    code: 400,
  },
  {
    name: 'UPDATE whose object is a string',
    old: frozenV1,
    new: 'widgets',
    allowed: false,
    reason: 'malformed-object',
    includes: ['got a string'],
  },
  {
    name: 'UPDATE whose object is an array',
    old: frozenV1,
    new: [frozenV1],
    allowed: false,
    reason: 'malformed-object',
    includes: ['got an array'],
  },
  { name: 'UPDATE whose oldObject is null', old: null, new: frozenV1, allowed: false, reason: 'malformed-object' },
  { name: 'CREATE with a null object', operation: 'CREATE', new: null, allowed: false, reason: 'malformed-object' },
  { name: 'DELETE without oldObject', operation: 'DELETE', allowed: false, reason: 'malformed-object', includes: ['request.oldObject'] },
  { name: 'break-glass does not override a malformed review', user: admin, new: frozenV1, allowed: false, reason: 'malformed-object' },
  // --- the state a resumed run trusts is guarded while frozen
  {
    name: 'a checkpoint moved forward by hand on a frozen CRD',
    old: crd({ annotations: { ...FROZEN, 'crd-migrator.io/owner': 'pod-a', 'crd-migrator.io/checkpoint': 'ns/a' } }),
    new: crd({ annotations: { ...FROZEN, 'crd-migrator.io/owner': 'pod-a', 'crd-migrator.io/checkpoint': 'zz/zz' } }),
    allowed: false,
    reason: 'annotation-guarded',
    includes: ['crd-migrator.io/checkpoint', 'user "alice"', 'system:masters'],
    code: 403,
  },
  {
    name: 'the owner removed from a frozen CRD',
    old: crd({ annotations: { ...FROZEN, 'crd-migrator.io/owner': 'pod-a' } }),
    new: crd({ annotations: FROZEN }),
    allowed: false,
    reason: 'annotation-guarded',
    includes: ['crd-migrator.io/owner'],
  },
  {
    name: 'the migrator writes its checkpoint and heartbeat',
    user: migratorSa,
    old: crd({ annotations: { ...FROZEN, 'crd-migrator.io/heartbeat': '1' } }),
    new: crd({ annotations: { ...FROZEN, 'crd-migrator.io/heartbeat': '2', 'crd-migrator.io/checkpoint': 'ns/a' } }),
    allowed: true,
    reason: 'allowed',
  },
  {
    name: 'break-glass may fix the state by hand',
    user: admin,
    old: crd({ annotations: { ...FROZEN, 'crd-migrator.io/checkpoint': 'ns/a' } }),
    new: crd({ annotations: FROZEN }),
    allowed: true,
    reason: 'break-glass-override',
  },
  {
    name: "progress and phase are the migrator's too",
    old: crd({ annotations: { ...FROZEN, 'crd-migrator.io/progress': '1/2' } }),
    new: crd({ annotations: { ...FROZEN, 'crd-migrator.io/progress': '2/2', 'crd-migrator.io/phase': 'x' } }),
    allowed: false,
    reason: 'annotation-guarded',
    includes: ['crd-migrator.io/phase, crd-migrator.io/progress'],
  },
  {
    name: 'frozen: removing progress is refused (a resumed run reads the state)',
    old: crd({ annotations: { ...FROZEN, 'crd-migrator.io/progress': '1/2' } }),
    new: frozenV1,
    allowed: false,
    reason: 'annotation-guarded',
  },
  // --- state annotations are guarded at all times: forged "already done" (issue: observed-generation + last-result)
  {
    name: 'unfrozen: forging last-result and observed-generation',
    old: crd(),
    new: crd({ annotations: { 'crd-migrator.io/last-result': 'Succeeded', 'crd-migrator.io/observed-generation': '7' } }),
    allowed: false,
    reason: 'annotation-guarded',
    includes: ['crd-migrator.io/last-result, crd-migrator.io/observed-generation', 'may not set or change'],
  },
  {
    name: 'unfrozen: a checkpoint changed by hand',
    old: crd({ annotations: { 'crd-migrator.io/checkpoint': 'ns/a' } }),
    new: crd({ annotations: { 'crd-migrator.io/checkpoint': 'zz/zz' } }),
    allowed: false,
    reason: 'annotation-guarded',
  },
  {
    name: 'unfrozen: an installer replacing the whole CRD drops the state annotations (allowed)',
    old: crd({ annotations: { 'crd-migrator.io/last-result': 'Succeeded', 'crd-migrator.io/finished-at': 'x' } }),
    new: crd({ shortNames: ['wd', 'wdg'] }),
    allowed: true,
    reason: 'allowed',
  },
  {
    name: 'unfrozen: unchanged state annotations pass',
    old: crd({ annotations: { 'crd-migrator.io/last-result': 'Succeeded' } }),
    new: crd({ annotations: { 'crd-migrator.io/last-result': 'Succeeded', 'example.com/other': 'x' } }),
    allowed: true,
    reason: 'allowed',
  },
  {
    name: 'unfrozen: break-glass may write state (override)',
    user: admin,
    old: crd(),
    new: crd({ annotations: { 'crd-migrator.io/last-result': 'Succeeded' } }),
    allowed: true,
    reason: 'break-glass-override',
  },
  {
    name: 'CREATE carrying a state annotation by a random user',
    operation: 'CREATE',
    new: crd({ annotations: { 'crd-migrator.io/observed-generation': '1', 'crd-migrator.io/last-result': 'Succeeded' } }),
    allowed: false,
    reason: 'annotation-guarded',
  },
  {
    name: 'CREATE carrying a state annotation by the migrator',
    operation: 'CREATE',
    user: migratorSa,
    new: crd({ annotations: { 'crd-migrator.io/last-result': 'Succeeded' } }),
    allowed: true,
    reason: 'allowed',
  },
  // --- /status: the CRD status strategy keeps metadata from the new object
  {
    name: '/status: the annotation removed by a status-only patcher',
    subResource: 'status',
    old: frozenV1,
    new: crd(),
    allowed: false,
    reason: 'annotation-guarded',
    includes: [`remove it (was "true")`],
  },
  {
    name: '/status: a checkpoint forged on a frozen CRD',
    subResource: 'status',
    old: crd({ annotations: { ...FROZEN, 'crd-migrator.io/checkpoint': 'ns/a' } }),
    new: crd({ annotations: { ...FROZEN, 'crd-migrator.io/checkpoint': 'zz/zz' } }),
    allowed: false,
    reason: 'annotation-guarded',
  },
  {
    name: '/status: storedVersions narrowed on a frozen CRD',
    subResource: 'status',
    old: withStored(frozenV1, ['v1alpha1', 'v1']),
    new: withStored(frozenV1, ['v1']),
    allowed: false,
    reason: 'stored-versions-frozen',
    includes: ['status.storedVersions from v1, v1alpha1 to v1', 'through /status', 'user "alice"'],
  },
  {
    name: '/status: storedVersions narrowed by the migrator',
    subResource: 'status',
    user: migratorSa,
    old: withStored(frozenV1, ['v1alpha1', 'v1']),
    new: withStored(frozenV1, ['v1']),
    allowed: true,
    reason: 'allowed',
  },
  {
    name: '/status: storedVersions narrowed by break-glass (override)',
    subResource: 'status',
    user: admin,
    old: withStored(frozenV1, ['v1alpha1', 'v1']),
    new: withStored(frozenV1, ['v1']),
    allowed: true,
    reason: 'break-glass-override',
  },
  {
    name: '/status: storedVersions reordered is no change',
    subResource: 'status',
    old: withStored(frozenV1, ['v1alpha1', 'v1']),
    new: withStored(frozenV1, ['v1', 'v1alpha1']),
    allowed: true,
    reason: 'allowed',
  },
  {
    name: '/status: storedVersions of an unfrozen CRD are not ours to guard',
    subResource: 'status',
    old: withStored(crd(), ['v1alpha1', 'v1']),
    new: withStored(crd(), ['v1']),
    allowed: true,
    reason: 'allowed',
  },
  {
    name: "/status: the API server's own condition write on a frozen CRD passes",
    subResource: 'status',
    user: apiserver,
    old: withStored(frozenV1, ['v1alpha1', 'v1']),
    new: {
      ...withStored(frozenV1, ['v1alpha1', 'v1']),
      status: { storedVersions: ['v1alpha1', 'v1'], conditions: [{ type: 'NamesAccepted', status: 'True' }] },
    },
    allowed: true,
    reason: 'allowed',
  },
  {
    name: '/status: storedVersions not a list on a frozen CRD fails closed',
    subResource: 'status',
    old: withStored(frozenV1, ['v1']),
    new: { ...frozenV1, status: { storedVersions: 'v1' } },
    allowed: false,
    reason: 'malformed-object',
  },
  // --- a ServiceAccount name needs a ServiceAccount token
  {
    name: 'a client certificate named like the migrator ServiceAccount is not the migrator',
    user: certNamedLikeSa,
    old: frozenV1,
    new: crd(),
    allowed: false,
    reason: 'annotation-guarded',
  },
  {
    name: 'the migrator ServiceAccount name without any credential id is not the migrator',
    user: saNameNoProof,
    old: crd(),
    new: frozenV1,
    allowed: false,
    reason: 'annotation-guarded',
  },
  // --- names from the request are bounded in the answer
  {
    name: 'a 1 MB request.name does not make a 1 MB message',
    requestName: 'x'.repeat(1_000_000),
    old: frozenV1alpha1,
    new: frozenV1,
    allowed: false,
    reason: 'storage-version-frozen',
    includes: ['(1000000 characters)'],
  },
  // --- a freeze marker that cannot be read fails closed (fuzz-webhook.test.ts found these)
  {
    name: 'UPDATE whose oldObject carries the migrating annotation as a boolean',
    old: { ...frozenV1, metadata: { name: NAME, annotations: { [KEY]: true } } },
    new: crd({
      versions: [
        ['v1alpha1', true],
        ['v1', false],
      ],
    }),
    allowed: false,
    reason: 'malformed-object',
    includes: ['request.oldObject', 'not a string', 'fail closed'],
    code: 400,
  },
  {
    name: 'UPDATE whose oldObject has annotations that are not an object',
    old: { ...frozenV1, metadata: { name: NAME, annotations: [KEY] } },
    new: frozenV1alpha1,
    allowed: false,
    reason: 'malformed-object',
    includes: ['metadata.annotations that is not an object'],
  },
  {
    name: 'UPDATE whose object has no metadata',
    old: frozenV1,
    new: { spec: frozenV1.spec },
    allowed: false,
    reason: 'malformed-object',
    includes: ['request.object', 'has no metadata'],
  },
  {
    name: 'UPDATE whose oldObject metadata is a string',
    old: { ...frozenV1, metadata: 'x' },
    new: frozenV1,
    allowed: false,
    reason: 'malformed-object',
  },
  {
    name: 'break-glass does not override an unreadable freeze marker either',
    user: admin,
    old: { ...frozenV1, metadata: { name: NAME, annotations: { [KEY]: 1 } } },
    new: frozenV1alpha1,
    allowed: false,
    reason: 'malformed-object',
  },
  {
    name: 'DELETE of a CRD whose annotation is not a string',
    operation: 'DELETE',
    old: { ...frozenV1, metadata: { name: NAME, annotations: { [KEY]: null } } },
    allowed: false,
    reason: 'malformed-object',
  },
  {
    name: 'CREATE with annotations that are a string',
    operation: 'CREATE',
    new: { ...frozenV1, metadata: { name: NAME, annotations: 'x' } },
    allowed: false,
    reason: 'malformed-object',
  },
  {
    name: 'null annotations are no annotations',
    old: { ...frozenV1, metadata: { name: NAME, annotations: null } },
    new: crd({
      versions: [
        ['v1alpha1', true],
        ['v1', false],
      ],
    }),
    allowed: true,
    reason: 'allowed',
  },
  // --- odds and ends ----------------------------------------------------------------
  { name: 'CONNECT is not judged', operation: 'CONNECT', allowed: true, reason: 'allowed' },
  {
    name: 'request.name absent: the CRD is named from metadata.name',
    requestName: null,
    old: crd({
      annotations: FROZEN,
      versions: [
        ['v1alpha1', true],
        ['v1', false],
      ],
      name: 'gadgets.example.com',
    }),
    new: crd({ annotations: FROZEN, name: 'gadgets.example.com' }),
    allowed: false,
    reason: 'storage-version-frozen',
    includes: ['"gadgets.example.com"'],
  },
  // --- Kubernetes' own migrator (StorageMigrating=True on the old object) ----------
  {
    name: 'built-in migration running: storage flip refused, for everyone',
    old: withCondition(
      crd({
        versions: [
          ['v1alpha1', true],
          ['v1', false],
        ],
      }),
      'True',
    ),
    new: withCondition(
      crd({
        versions: [
          ['v1alpha1', false],
          ['v1', true],
        ],
      }),
      'True',
    ),
    user: admin,
    allowed: false,
    reason: 'storage-version-frozen',
    includes: [
      NAME,
      'StorageMigrating=True',
      'built-in StorageVersionMigration',
      'from v1alpha1 to v1',
      'storageversionmigrations.storagemigration.k8s.io',
    ],
  },
  {
    name: 'built-in migration running: delete refused',
    operation: 'DELETE',
    old: withCondition(crd(), 'True'),
    allowed: false,
    reason: 'delete-frozen',
    includes: ['StorageMigrating=True'],
  },
  {
    name: 'built-in migration finished (StorageMigrating=False): storage flip allowed',
    old: withCondition(
      crd({
        versions: [
          ['v1alpha1', true],
          ['v1', false],
        ],
      }),
      'False',
    ),
    new: withCondition(
      crd({
        versions: [
          ['v1alpha1', false],
          ['v1', true],
        ],
      }),
      'False',
    ),
    allowed: true,
    reason: 'allowed',
  },
  {
    name: 'built-in migration running: it narrows storedVersions itself (no annotation freeze): allowed',
    subResource: 'status',
    user: kcmSvm,
    old: withCondition(withStored(crd(), ['v1alpha1', 'v1']), 'True'),
    new: withCondition(withStored(crd(), ['v1']), 'False'),
    allowed: true,
    reason: 'allowed',
  },
  {
    name: 'built-in migration running: unrelated spec change allowed',
    old: withCondition(crd({ shortNames: ['wd'] }), 'True'),
    new: withCondition(crd({ shortNames: ['wdg'] }), 'True'),
    allowed: true,
    reason: 'allowed',
  },
  {
    name: 'our freeze: kube-controller-manager marking the CRD StorageMigrating is deferred',
    subResource: 'status',
    user: kcmSvm,
    old: frozenV1,
    new: withCondition(frozenV1, 'True'),
    allowed: false,
    reason: 'builtin-migration-deferred',
    includes: [NAME, 'StorageMigrating=True', 'after it'],
    code: 403,
  },
  {
    name: 'our freeze: break-glass cannot start a built-in migration either',
    subResource: 'status',
    user: admin,
    old: frozenV1,
    new: withCondition(frozenV1, 'True'),
    allowed: false,
    reason: 'builtin-migration-deferred',
  },
  {
    name: 'our freeze delegated to the built-in migrator (engine builtin): StorageMigrating=True allowed',
    subResource: 'status',
    user: kcmSvm,
    old: crd({ annotations: { ...FROZEN, 'crd-migrator.io/builtin-migration': 'crd-migrator-widgets-g2-abcde' } }),
    new: withCondition(crd({ annotations: { ...FROZEN, 'crd-migrator.io/builtin-migration': 'crd-migrator-widgets-g2-abcde' } }), 'True'),
    allowed: true,
    reason: 'allowed',
  },
  {
    name: 'our freeze delegated: the built-in migrator may not narrow storedVersions under it (we do, after our checks)',
    subResource: 'status',
    user: kcmSvm,
    old: withCondition(
      withStored(crd({ annotations: { ...FROZEN, 'crd-migrator.io/builtin-migration': 'x' } }), ['v1alpha1', 'v1']),
      'True',
    ),
    new: withCondition(withStored(crd({ annotations: { ...FROZEN, 'crd-migrator.io/builtin-migration': 'x' } }), ['v1']), 'False'),
    allowed: false,
    reason: 'stored-versions-frozen',
  },
  {
    name: 'our freeze delegated: its condition write leaving storedVersions as we set them is allowed',
    subResource: 'status',
    user: kcmSvm,
    old: withCondition(withStored(crd({ annotations: { ...FROZEN, 'crd-migrator.io/builtin-migration': 'x' } }), ['v1']), 'True'),
    new: withCondition(withStored(crd({ annotations: { ...FROZEN, 'crd-migrator.io/builtin-migration': 'x' } }), ['v1']), 'False'),
    allowed: true,
    reason: 'allowed',
  },
  {
    name: 'a StorageMigrating condition that is not a list is not read as a freeze',
    old: {
      ...crd({
        versions: [
          ['v1alpha1', true],
          ['v1', false],
        ],
      }),
      status: { conditions: 'StorageMigrating' },
    },
    new: {
      ...crd({
        versions: [
          ['v1alpha1', false],
          ['v1', true],
        ],
      }),
      status: { conditions: 'StorageMigrating' },
    },
    allowed: true,
    reason: 'allowed',
  },
  // --- the StorageMigrating condition is guarded like the annotation ----------------
  {
    name: 'a status-only user adds StorageMigrating=True (freezing the CRD against everyone): refused',
    subResource: 'status',
    old: crd(),
    new: withCondition(crd(), 'True'),
    allowed: false,
    reason: 'builtin-condition-guarded',
    includes: [
      NAME,
      'user "alice" may not add it',
      'system:kube-controller-manager',
      'storage-version-migrator-controller',
      'system:masters',
    ],
    code: 403,
  },
  {
    name: 'a status-only user sets a real StorageMigrating=True to False (lifting the built-in freeze): refused',
    subResource: 'status',
    old: withCondition(crd(), 'True'),
    new: withCondition(crd(), 'False'),
    allowed: false,
    reason: 'builtin-condition-guarded',
    includes: ['change its status from "True" to "False"', 'break-glass'],
  },
  {
    name: 'a status-only user removes the StorageMigrating condition: refused',
    subResource: 'status',
    old: withCondition(crd(), 'True'),
    new: { ...crd(), status: { conditions: [] } },
    allowed: false,
    reason: 'builtin-condition-guarded',
    includes: ['may not remove it'],
  },
  {
    name: 'a status-only user adds StorageMigrating=False: refused too (any change of the condition)',
    subResource: 'status',
    old: crd(),
    new: withCondition(crd(), 'False'),
    allowed: false,
    reason: 'builtin-condition-guarded',
  },
  {
    name: 'changing only the condition message (status stays True): allowed, it freezes nothing more',
    subResource: 'status',
    old: withConditionMessage(crd(), 'True', 'Migration svm-1 is running'),
    new: withConditionMessage(crd(), 'True', 'something else'),
    allowed: true,
    reason: 'allowed',
  },
  {
    name: "kube-controller-manager's ServiceAccount (token) marks an unfrozen CRD StorageMigrating=True: allowed",
    subResource: 'status',
    user: kcmSvm,
    old: crd(),
    new: withCondition(crd(), 'True'),
    allowed: true,
    reason: 'allowed',
  },
  {
    name: 'kube-controller-manager as its own user sets the condition to False: allowed',
    subResource: 'status',
    user: kcm,
    old: withCondition(crd(), 'True'),
    new: withCondition(crd(), 'False'),
    allowed: true,
    reason: 'allowed',
  },
  {
    name: "a client certificate named like kube-controller-manager's ServiceAccount is not kube-controller-manager",
    subResource: 'status',
    user: certNamedLikeKcmSa,
    old: crd(),
    new: withCondition(crd(), 'True'),
    allowed: false,
    reason: 'builtin-condition-guarded',
  },
  {
    name: 'no kube-controller-manager identity configured: its condition write is refused like anyone else’s',
    subResource: 'status',
    user: kcm,
    policy: { ...policy, builtinMigratorUsers: [] },
    old: crd(),
    new: withCondition(crd(), 'True'),
    allowed: false,
    reason: 'builtin-condition-guarded',
    includes: ['no identity configured'],
  },
  {
    name: 'break-glass clears a StorageMigrating=True left behind: allowed, with a warning',
    subResource: 'status',
    user: admin,
    old: withCondition(crd(), 'True'),
    new: withCondition(crd(), 'False'),
    allowed: true,
    reason: 'break-glass-override',
    includes: ['StorageMigrating condition changed'],
  },
  {
    name: 'the migrator may change the condition (it is not sent, but if it is)',
    subResource: 'status',
    user: migratorSa,
    old: withCondition(crd(), 'True'),
    new: withCondition(crd(), 'False'),
    allowed: true,
    reason: 'allowed',
  },
  {
    name: 'the condition with a status that is not a string counts as changed',
    subResource: 'status',
    old: withCondition(crd(), 'True'),
    new: { ...crd(), status: { conditions: [{ type: 'StorageMigrating', status: true }] } },
    allowed: false,
    reason: 'builtin-condition-guarded',
    includes: ['(not a string)'],
  },
  {
    name: 'under our freeze a status-only user setting True: refused for both reasons',
    subResource: 'status',
    old: frozenV1,
    new: withCondition(frozenV1, 'True'),
    allowed: false,
    reason: 'builtin-condition-guarded',
    includes: ['Also:', 'may not start another storage version migration'],
  },
  // --- while frozen: versions that hold objects stay served, conversion stays ------
  {
    name: 'frozen: un-serving a version in status.storedVersions is refused, to break-glass too',
    user: admin,
    old: withStored(frozenV1, ['v1alpha1', 'v1']),
    new: withStored(crd({ annotations: FROZEN, unserved: ['v1alpha1'] }), ['v1alpha1', 'v1']),
    allowed: false,
    reason: 'served-versions-frozen',
    includes: [
      NAME,
      'version v1alpha1 holds its objects',
      'v1, v1alpha1',
      'for any user',
      'first removes the annotation in a request of its own',
    ],
    code: 403,
  },
  {
    name: 'frozen: un-serving the storage version is refused',
    old: frozenV1,
    new: crd({ annotations: FROZEN, unserved: ['v1'] }),
    allowed: false,
    reason: 'served-versions-frozen',
    includes: ['version v1 holds its objects'],
  },
  {
    name: 'frozen: un-serving a version that holds no object is allowed',
    old: withStored(frozenV1, ['v1']),
    new: withStored(crd({ annotations: FROZEN, unserved: ['v1alpha1'] }), ['v1']),
    allowed: true,
    reason: 'allowed',
  },
  {
    name: 'frozen: a stored version that was not served before stays unserved: allowed (nothing changes)',
    old: withStored(crd({ annotations: FROZEN, unserved: ['v1alpha1'] }), ['v1alpha1', 'v1']),
    new: withStored(crd({ annotations: FROZEN, unserved: ['v1alpha1'], shortNames: ['wdg'] }), ['v1alpha1', 'v1']),
    allowed: true,
    reason: 'allowed',
  },
  {
    name: 'not frozen: un-serving a stored version is allowed (the API server keeps its own rules)',
    old: withStored(crd(), ['v1alpha1', 'v1']),
    new: withStored(crd({ unserved: ['v1alpha1'] }), ['v1alpha1', 'v1']),
    allowed: true,
    reason: 'allowed',
  },
  {
    name: 'built-in migration running: un-serving a stored version is refused',
    old: withCondition(withStored(crd(), ['v1alpha1', 'v1']), 'True'),
    new: withCondition(withStored(crd({ unserved: ['v1alpha1'] }), ['v1alpha1', 'v1']), 'True'),
    allowed: false,
    reason: 'served-versions-frozen',
    includes: ['StorageMigrating=True', 'storageversionmigrations.storagemigration.k8s.io'],
  },
  {
    name: 'frozen: pointing spec.conversion at a webhook is refused, to break-glass too',
    user: admin,
    old: crd({ annotations: FROZEN, conversion: { strategy: 'None' } }),
    new: crd({
      annotations: FROZEN,
      conversion: {
        strategy: 'Webhook',
        webhook: { clientConfig: { url: 'https://evil.example.com/convert' }, conversionReviewVersions: ['v1'] },
      },
    }),
    allowed: false,
    reason: 'conversion-frozen',
    includes: [NAME, 'spec.conversion', '"None" -> "Webhook"', 'for any user', 'first removes the annotation'],
    code: 403,
  },
  {
    name: "frozen: changing the conversion webhook's service is refused",
    old: crd({
      annotations: FROZEN,
      conversion: { strategy: 'Webhook', webhook: { clientConfig: { service: { namespace: 'a', name: 'conv' } } } },
    }),
    new: crd({
      annotations: FROZEN,
      conversion: { strategy: 'Webhook', webhook: { clientConfig: { service: { namespace: 'a', name: 'mine' } } } },
    }),
    allowed: false,
    reason: 'conversion-frozen',
  },
  {
    name: 'frozen: the same conversion written in another key order is no change',
    old: crd({
      annotations: FROZEN,
      conversion: { strategy: 'Webhook', webhook: { conversionReviewVersions: ['v1'], clientConfig: { url: 'https://c' } } },
    }),
    new: crd({
      annotations: FROZEN,
      conversion: { webhook: { clientConfig: { url: 'https://c' }, conversionReviewVersions: ['v1'] }, strategy: 'Webhook' },
    }),
    allowed: true,
    reason: 'allowed',
  },
  {
    name: 'frozen: adding conversion where there was none is a change',
    old: frozenV1,
    new: crd({ annotations: FROZEN, conversion: { strategy: 'Webhook' } }),
    allowed: false,
    reason: 'conversion-frozen',
  },
  {
    name: 'not frozen: changing spec.conversion is allowed',
    old: crd({ conversion: { strategy: 'None' } }),
    new: crd({ conversion: { strategy: 'Webhook', webhook: { clientConfig: { url: 'https://c' } } } }),
    allowed: true,
    reason: 'allowed',
  },
  {
    name: 'frozen: a conversion nested past any CRD (a hostile review) counts as changed, without overflowing',
    old: crd({ annotations: FROZEN, conversion: deepValue(300_000) }),
    new: crd({ annotations: FROZEN, conversion: deepValue(300_000) }),
    allowed: false,
    reason: 'conversion-frozen',
  },
]

t.ok(rows.length >= 30, `at least 30 rows (${rows.length})`)

for (const row of rows) {
  t.test(row.name, async (t) => {
    const input: AdmissionInput = { operation: row.operation ?? 'UPDATE', userInfo: row.user ?? alice }
    if (row.requestName !== null) input.name = row.requestName ?? NAME
    if (row.new !== undefined) input.object = row.new
    if (row.old !== undefined) input.oldObject = row.old
    if (row.subResource !== undefined) input.subResource = row.subResource
    if (row.freezeAllowed) input.freezeAllowed = true
    const decision = decideAdmission(input, row.policy ?? policy)

    t.equal(decision.allowed, row.allowed, 'allowed')
    t.equal(decision.reason, row.reason, 'reason')
    if (!row.allowed) {
      t.type(decision.message, 'string', 'denials carry a message')
      t.equal(decision.code, row.code ?? decision.code, 'status code')
      t.ok(decision.code === 403 || decision.code === 400, 'denial code is 403 or 400')
      t.ok((decision.message ?? '').length < 4000, 'the message stays short')
    }
    if (row.reason === 'break-glass-override') {
      t.equal(decision.warnings?.length, 1, 'one warning')
      t.ok((decision.warnings?.[0] ?? '').length < 250, 'warning is short enough for kubectl')
    }
    const text = row.allowed ? (decision.warnings ?? []).join('\n') : (decision.message ?? '')
    for (const part of row.includes ?? []) t.ok(text.includes(part), `mentions ${JSON.stringify(part)}`, { text })
    if (row.allowed && row.reason === 'allowed') t.equal(decision.message, undefined, 'no message when simply allowed')
  })
}

t.test('a deeply nested annotation value is not looked into (no stack overflow) and counts as a change', async (t) => {
  let deep: unknown = 'x'
  for (let i = 0; i < 200_000; i++) deep = [deep]
  const old = crd({ annotations: { ...FROZEN, 'crd-migrator.io/owner': 'pod-a' } })
  const changed = { ...old, metadata: { ...old.metadata, annotations: { ...FROZEN, 'crd-migrator.io/owner': deep } } }
  const decision = decideAdmission({ operation: 'UPDATE', name: NAME, userInfo: alice, oldObject: old, object: changed }, policy)
  t.equal(decision.allowed, false)
  t.equal(decision.reason, 'annotation-guarded')
  const both = decideAdmission({ operation: 'UPDATE', name: NAME, userInfo: alice, oldObject: changed, object: changed }, policy)
  t.equal(both.reason, 'annotation-guarded', 'two values that are not strings are never "the same"')
  const migrator = decideAdmission({ operation: 'UPDATE', name: NAME, userInfo: migratorSa, oldObject: old, object: changed }, policy)
  t.equal(migrator.allowed, true, 'the migrator may write its state')
})

t.test('the decision never throws, whatever it is given', async (t) => {
  const junk: unknown[] = [
    undefined,
    null,
    0,
    'x',
    [],
    {},
    { metadata: 'x' },
    { metadata: { annotations: 'x' } },
    { metadata: { annotations: { [KEY]: 7 } } },
    { metadata: { annotations: FROZEN }, spec: 'x' },
    { metadata: { annotations: FROZEN }, spec: { versions: [null] } },
    { metadata: { annotations: FROZEN }, spec: { versions: [{ storage: true }] } },
  ]
  for (const operation of ['CREATE', 'UPDATE', 'DELETE', 'CONNECT'] as const) {
    for (const object of junk) {
      for (const oldObject of junk) {
        const decision = decideAdmission({ operation, userInfo: alice, object, oldObject }, policy)
        if (typeof decision.allowed !== 'boolean') t.fail('no decision')
      }
    }
  }
  t.pass('survived')
})
