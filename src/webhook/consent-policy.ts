/**
 * Who may consent to a rewrite's changes on a CRD (state/crd-state.ts ConsentAnnotation): the
 * ValidatingAdmissionPolicy of docs/migrate-one-crd.md#lossless-or-refused-the-check-before-any-write.
 * A policy rather than the freeze webhook: RBAC's answer, asked in-process, with no
 * SubjectAccessReview round trip and no webhook to starve. admissionregistration.k8s.io/v1
 * policies are GA from Kubernetes 1.30, the oldest this project supports.
 */
import { ConsentAnnotation } from '../state/crd-state.js'

/** The RBAC verb that lets a user consent on a CRD (resourceNames may narrow it to some CRDs). */
export const ACCEPT_CHANGES_VERB = 'accept-changes'

const KEYS = Object.values(ConsentAnnotation)
  .map((k) => `'${k}'`)
  .join(', ')

/** True when the request sets or changes a consent annotation (CREATE: sets any). */
export const CONSENT_CHANGED_EXPRESSION =
  `[${KEYS}].exists(k, has(object.metadata.annotations) && k in object.metadata.annotations && ` +
  `(oldObject == null || !has(oldObject.metadata.annotations) || !(k in oldObject.metadata.annotations) || ` +
  `oldObject.metadata.annotations[k] != object.metadata.annotations[k]))`

export const CONSENT_ALLOWED_EXPRESSION = `authorizer.group('apiextensions.k8s.io').resource('customresourcedefinitions').name(object.metadata.name).check('${ACCEPT_CHANGES_VERB}').allowed()`

/** The refusal, naming the ClusterRole that grants the permission. */
export function consentMessageExpression(roleName: string): string {
  return (
    `'only a user allowed to ${ACCEPT_CHANGES_VERB} customresourcedefinitions/' + object.metadata.name + ' (RBAC) may set ${Object.values(ConsentAnnotation).join(' or ')}; ` +
    `grant it with the ClusterRole ${roleName} (or a rule: apiGroups [apiextensions.k8s.io], resources [customresourcedefinitions], verbs [${ACCEPT_CHANGES_VERB}])'`
  )
}

/** The policy and its binding, named `name` (the chart renders the same from templates/consent-policy.yaml). */
export function consentPolicy(name: string, roleName = `${name}-accept-changes`): [Record<string, unknown>, Record<string, unknown>] {
  const policy = {
    apiVersion: 'admissionregistration.k8s.io/v1',
    kind: 'ValidatingAdmissionPolicy',
    metadata: { name },
    spec: {
      failurePolicy: 'Fail',
      matchConstraints: {
        resourceRules: [
          {
            apiGroups: ['apiextensions.k8s.io'],
            apiVersions: ['*'],
            operations: ['CREATE', 'UPDATE'],
            // The CRD status strategy keeps metadata from the new object: annotations sent there are saved.
            resources: ['customresourcedefinitions', 'customresourcedefinitions/status'],
          },
        ],
      },
      variables: [{ name: 'consentChanged', expression: CONSENT_CHANGED_EXPRESSION }],
      validations: [
        {
          expression: `!variables.consentChanged || ${CONSENT_ALLOWED_EXPRESSION}`,
          messageExpression: consentMessageExpression(roleName),
          reason: 'Forbidden',
        },
      ],
    },
  }
  const binding = {
    apiVersion: 'admissionregistration.k8s.io/v1',
    kind: 'ValidatingAdmissionPolicyBinding',
    metadata: { name },
    spec: { policyName: name, validationActions: ['Deny'] },
  }
  return [policy, binding]
}
