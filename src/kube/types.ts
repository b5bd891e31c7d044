/** The parts of Kubernetes objects the migrator reads. Kept minimal on purpose. */

export interface ManagedFieldsEntry {
  manager?: string
  /** 'Apply' or 'Update' today; kept open for what later API servers write. */
  operation?: string
  apiVersion?: string
  time?: string
  fieldsType?: string
  fieldsV1?: Record<string, unknown>
  subresource?: string
}

export interface ObjectMeta {
  name: string
  namespace?: string
  uid?: string
  resourceVersion?: string
  generation?: number
  creationTimestamp?: string
  deletionTimestamp?: string
  labels?: Record<string, string>
  annotations?: Record<string, string>
  managedFields?: ManagedFieldsEntry[]
}

export interface PartialObjectMetadata {
  apiVersion?: string
  kind?: string
  metadata: ObjectMeta
}

export interface ListMeta {
  continue?: string
  resourceVersion?: string
  remainingItemCount?: number
}

export interface PartialObjectMetadataList {
  apiVersion?: string
  kind?: string
  metadata: ListMeta
  items: PartialObjectMetadata[]
}

export interface CrdVersion {
  name: string
  served: boolean
  storage: boolean
  deprecated?: boolean
  subresources?: { status?: Record<string, never> | object; scale?: object }
  schema?: unknown
}

export interface CrdCondition {
  type: string
  status: 'True' | 'False' | 'Unknown'
  reason?: string
  message?: string
}

export interface CustomResourceDefinition {
  apiVersion: 'apiextensions.k8s.io/v1'
  kind: 'CustomResourceDefinition'
  metadata: ObjectMeta
  spec: {
    group: string
    names: { plural: string; kind: string; singular?: string; listKind?: string }
    scope: 'Namespaced' | 'Cluster'
    versions: CrdVersion[]
    conversion?: unknown
  }
  status?: {
    storedVersions?: string[]
    conditions?: CrdCondition[]
    acceptedNames?: { plural?: string; kind?: string; shortNames?: string[]; categories?: string[] }
  }
}
