import type { CustomResourceDefinition } from './types.js'

const enc = encodeURIComponent

export const CRD_API = '/apis/apiextensions.k8s.io/v1/customresourcedefinitions'

export function crdPath(name: string, subresource?: 'status'): string {
  return `${CRD_API}/${enc(name)}${subresource ? `/${subresource}` : ''}`
}

/** Where the custom resources of a CRD live, addressed through one of its versions. */
export interface ResourceRef {
  group: string
  version: string
  plural: string
  kind: string
  namespaced: boolean
}

export function resourceRef(crd: CustomResourceDefinition, version: string): ResourceRef {
  return {
    group: crd.spec.group,
    version,
    plural: crd.spec.names.plural,
    kind: crd.spec.names.kind,
    namespaced: crd.spec.scope === 'Namespaced',
  }
}

/** `/apis/<group>`: a group's discovery document (its versions, the preferred one). */
export function groupPath(group: string): string {
  return `/apis/${enc(group)}`
}

/** `/apis/<group>/<version>`, or `/api/<version>` for the core group (''). */
export function groupVersionPath(ref: Pick<ResourceRef, 'group' | 'version'>): string {
  return ref.group === '' ? `/api/${enc(ref.version)}` : `/apis/${enc(ref.group)}/${enc(ref.version)}`
}

/** The collection path: of all namespaces, or of `namespace` when one is given. */
export function collectionPath(ref: Pick<ResourceRef, 'group' | 'version' | 'plural'>, namespace?: string): string {
  const ns = namespace === undefined ? '' : `/namespaces/${enc(namespace)}`
  return `${groupVersionPath(ref)}${ns}/${enc(ref.plural)}`
}

/** One object's path; `namespace` counts for a namespaced resource only. */
export function objectPath(ref: ResourceRef, namespace: string | undefined, name: string, subresource?: 'status'): string {
  const collection = collectionPath(ref, ref.namespaced ? (namespace ?? '') : undefined)
  return `${collection}/${enc(name)}${subresource ? `/${subresource}` : ''}`
}

/** The order in which the API server lists objects (etcd key order), as a comparable key. */
export function listOrderKey(namespace: string | undefined, name: string): string {
  return namespace ? `${namespace}/${name}` : name
}

export function apiVersionOf(ref: Pick<ResourceRef, 'group' | 'version'>): string {
  return ref.group === '' ? ref.version : `${ref.group}/${ref.version}`
}
