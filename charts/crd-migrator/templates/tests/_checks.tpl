{{/* Names of the `helm test` hook's objects (tests.enabled). */}}
{{- define "crd-migrator.testName" -}}
{{- printf "%s-test" (include "crd-migrator.fullname" .) | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The probe CRD the test forges an annotation on: a CRD of its own, so that its
ServiceAccount may patch that one CRD and no other. Cluster-wide, hence the namespace in
its group.
*/}}
{{- define "crd-migrator.testProbeGroup" -}}
{{- printf "%s.%s.helm-test.crd-migrator.io" (include "crd-migrator.fullname" .) .Release.Namespace }}
{{- end }}

{{- define "crd-migrator.testProbeCrd" -}}
{{- printf "probes.%s" (include "crd-migrator.testProbeGroup" .) }}
{{- end }}

{{/* One SelfSubjectAccessReview check of files/helm-test.mjs (its access Pod runs as the migrator's ServiceAccount). */}}
{{- define "crd-migrator.testAccess" -}}
{{- $attributes := dict "verb" .verb "group" .group "resource" .resource }}
{{- range $key := list "subresource" "namespace" "name" }}
{{- if hasKey $ $key }}{{ $_ := set $attributes $key (get $ $key) }}{{ end }}
{{- end }}
{{- dict "allowed" .allowed "what" .what "attributes" $attributes | toJson }}
{{- end }}

{{/*
checks.json of files/helm-test.mjs: the webhook to reach, and what the migrator's
ServiceAccount may and may not do, from the same values rbac.yaml renders its rules from
(with rbac.create=false: what your own RBAC must grant).
*/}}
{{- define "crd-migrator.testChecks" -}}
{{- $ns := .Release.Namespace }}
{{- $sa := include "crd-migrator.serviceAccountName" . }}
{{- $crds := dict "group" "apiextensions.k8s.io" "resource" "customresourcedefinitions" }}
{{- $access := list }}
{{- if .Values.migrator.enabled }}
{{- $access = append $access (merge (dict "allowed" true "what" "the CRD watch" "verb" "watch") $crds) }}
{{- $access = append $access (merge (dict "allowed" true "what" "the freeze and its progress" "verb" "patch" "name" "any.example.com") $crds) }}
{{- $access = append $access (merge (dict "allowed" true "what" "status.storedVersions" "verb" "patch" "subresource" "status" "name" "any.example.com") $crds) }}
{{- if .Values.leaderElection.enabled }}
{{- $access = append $access (dict "allowed" true "what" "leader election" "verb" "create" "group" "coordination.k8s.io" "resource" "leases" "namespace" $ns) }}
{{- $access = append $access (dict "allowed" true "what" "leader election" "verb" "update" "group" "coordination.k8s.io" "resource" "leases" "namespace" $ns "name" (include "crd-migrator.leaseName" .)) }}
{{- end }}
{{- $access = append $access (dict "allowed" true "what" "Events about CRDs" "verb" "create" "group" "events.k8s.io" "resource" "events" "namespace" "default") }}
{{- $access = append $access (dict "allowed" true "what" "every API server, before the storage switch" "verb" "list" "group" "discovery.k8s.io" "resource" "endpointslices" "namespace" "default") }}
{{- if .Values.rbac.allGroups }}
{{- $access = append $access (dict "allowed" true "what" "rbac.allGroups" "verb" "patch" "group" "*" "resource" "*") }}
{{- else }}
{{- range $group := .Values.rbac.managedGroups | uniq }}
{{- $access = append $access (dict "allowed" true "what" "rbac.managedGroups" "verb" "patch" "group" $group "resource" "*") }}
{{- end }}
{{- range $crd := include "crd-migrator.namedCrds" . | fromJsonArray }}
{{- $access = append $access (dict "allowed" true "what" "migrator.names / migrator.crds" "verb" "patch" "group" $crd.group "resource" $crd.plural) }}
{{- if $crd.status }}
{{- $access = append $access (dict "allowed" true "what" "useStatusSubresource" "verb" "patch" "group" $crd.group "resource" $crd.plural "subresource" "status") }}
{{- end }}
{{- end }}
{{- end }}
{{- range $r := include "crd-migrator.builtInResources" . | fromJsonArray }}
{{- $access = append $access (dict "allowed" true "what" "migrator.builtInResources" "verb" "patch" "group" $r.group "resource" $r.resource) }}
{{- end }}
{{- if .Values.storageVersionMigrations.enabled }}
{{- $access = append $access (dict "allowed" true "what" "storageVersionMigrations.enabled" "verb" "watch" "group" "migration.k8s.io" "resource" "storageversionmigrations") }}
{{- $access = append $access (dict "allowed" true "what" "storageVersionMigrations.enabled" "verb" "patch" "group" "migration.k8s.io" "resource" "storageversionmigrations" "subresource" "status") }}
{{- end }}
{{- if .Values.storageVersionMigrations.trigger.enabled }}
{{- $access = append $access (dict "allowed" true "what" "storageVersionMigrations.trigger.enabled" "verb" "create" "group" "migration.k8s.io" "resource" "storagestates") }}
{{- $access = append $access (dict "allowed" true "what" "storageVersionMigrations.trigger.enabled" "verb" "update" "group" "migration.k8s.io" "resource" "storagestates" "subresource" "status") }}
{{- $access = append $access (dict "allowed" true "what" "storageVersionMigrations.trigger.enabled" "verb" "create" "group" "migration.k8s.io" "resource" "storageversionmigrations") }}
{{- end }}
{{- range $r := include "crd-migrator.stashResources" . | fromJsonArray }}
{{- range $verb := $r.verbs }}
{{- $access = append $access (dict "allowed" true "what" "stash rules" "verb" $verb "group" $r.group "resource" $r.resource) }}
{{- end }}
{{- end }}
{{- /* What it never does. */}}
{{- $access = append $access (merge (dict "allowed" false "what" "it never deletes a CRD" "verb" "delete" "name" "any.example.com") $crds) }}
{{- $access = append $access (merge (dict "allowed" false "what" "it patches, never replaces, CRDs" "verb" "update" "name" "any.example.com") $crds) }}
{{- $secretsGranted := .Values.rbac.allGroups }}
{{- range $r := include "crd-migrator.builtInResources" . | fromJsonArray }}
{{- if and (eq $r.group "") (eq $r.resource "secrets") }}{{ $secretsGranted = true }}{{ end }}
{{- end }}
{{- if not $secretsGranted }}
{{- $access = append $access (dict "allowed" false "what" "it reads no Secret (the kubelet mounts its state key)" "verb" "get" "group" "" "resource" "secrets" "namespace" $ns "name" (include "crd-migrator.stateKeySecretName" .)) }}
{{- end }}
{{- else }}
{{- /* Webhook only: the ServiceAccount has no RBAC at all. */}}
{{- $access = append $access (merge (dict "allowed" false "what" "webhook only (migrator.enabled=false)" "verb" "patch" "name" "any.example.com") $crds) }}
{{- $access = append $access (dict "allowed" false "what" "webhook only (migrator.enabled=false)" "verb" "create" "group" "coordination.k8s.io" "resource" "leases" "namespace" $ns) }}
{{- end }}
{{- $checks := list }}
{{- range $a := $access }}
{{- $checks = append $checks (include "crd-migrator.testAccess" $a | fromJson) }}
{{- end }}
{{- dict
  "webhook" (dict "name" "storage-freeze.crd-migrator.io" "crd" (include "crd-migrator.testProbeCrd" .) "annotation" "crd-migrator.io/helm-test")
  "subject" (dict "user" (printf "system:serviceaccount:%s:%s" $ns $sa))
  "access" $checks
  | toPrettyJson }}
{{- end }}

{{/* Hook annotations of the test's objects: .weight orders them (the Pod runs last). */}}
{{- define "crd-migrator.testHook" -}}
helm.sh/hook: test
helm.sh/hook-weight: {{ .weight | quote }}
helm.sh/hook-delete-policy: {{ .deletePolicy | default "before-hook-creation,hook-succeeded" }}
{{- end }}
