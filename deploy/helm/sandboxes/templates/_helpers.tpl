{{/* Names, labels and small computed values shared by every template. */}}

{{- define "sandboxes.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "sandboxes.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "sandboxes.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "sandboxes.labels" -}}
helm.sh/chart: {{ include "sandboxes.chart" . }}
app.kubernetes.io/name: {{ include "sandboxes.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{/* Selects the manager pods (API server + pool manager). */}}
{{- define "sandboxes.managerSelector" -}}
app.kubernetes.io/name: {{ include "sandboxes.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: manager
{{- end -}}

{{/* The pool label value put on every sandbox pod of this release. */}}
{{- define "sandboxes.pool" -}}
{{- include "sandboxes.fullname" . -}}
{{- end -}}

{{- define "sandboxes.sandboxNamespace" -}}
{{- default .Release.Namespace .Values.sandbox.namespace -}}
{{- end -}}

{{- define "sandboxes.serviceAccountName" -}}
{{- if .Values.serviceAccount.create -}}
{{- default (include "sandboxes.fullname" .) .Values.serviceAccount.name -}}
{{- else -}}
{{- default "default" .Values.serviceAccount.name -}}
{{- end -}}
{{- end -}}

{{- define "sandboxes.apiKeysSecret" -}}
{{- default (printf "%s-api-keys" (include "sandboxes.fullname" .)) .Values.apiKeys.existingSecret -}}
{{- end -}}

{{- define "sandboxes.managerImage" -}}
{{- printf "%s:%s" .Values.manager.image.repository (default .Chart.AppVersion .Values.manager.image.tag) -}}
{{- end -}}

{{- define "sandboxes.sandboxImage" -}}
{{- printf "%s:%s" .Values.sandbox.image.repository (default "latest" .Values.sandbox.image.tag) -}}
{{- end -}}

{{/* The kubernetes backend's settings (sandboxes.backends.kubernetes.KubeConfig), as JSON. */}}
{{- define "sandboxes.kubeConfig" -}}
{{- $s := .Values.sandbox -}}
{{- $c := dict
  "namespace" (include "sandboxes.sandboxNamespace" .)
  "image" (include "sandboxes.sandboxImage" .)
  "image_pull_policy" $s.image.pullPolicy
  "image_pull_secrets" $s.imagePullSecrets
  "agent_command" $s.agentCommand
  "agent_port" (int $s.agentPort)
  "resources" $s.resources
  "node_selector" $s.nodeSelector
  "tolerations" $s.tolerations
  "labels" $s.labels
  "annotations" $s.annotations
  "host_users" $s.hostUsers
  "termination_grace_s" (int $s.terminationGracePeriodSeconds)
  "work_size_limit" $s.workSizeLimit
  "tmp_size_limit" $s.tmpSizeLimit
  "pool" (include "sandboxes.pool" .)
  "token_mode" $s.tokenMode
  "ready_timeout_s" $s.readyTimeoutSeconds
  "create_concurrency" (int $s.createConcurrency)
  "api_concurrency" (int .Values.manager.kubeApi.concurrency)
  "api_qps" .Values.manager.kubeApi.qps
  "replica_lease_s" .Values.manager.replicaLeaseSeconds
-}}
{{- if $s.runtimeClassName }}{{ $_ := set $c "runtime_class_name" $s.runtimeClassName }}{{ end -}}
{{- if $s.registryUrl }}{{ $_ := set $c "registry_url" $s.registryUrl }}{{ end -}}
{{- if $s.volumeStorageClass }}{{ $_ := set $c "volume_storage_class" $s.volumeStorageClass }}{{ end -}}
{{- $_ := set $c "volume_access_mode" $s.volumeAccessMode -}}
{{- if $s.priorityClassName }}{{ $_ := set $c "priority_class_name" $s.priorityClassName }}{{ end -}}
{{- if $s.affinity }}{{ $_ := set $c "affinity" $s.affinity }}{{ end -}}
{{- if kindIs "invalid" $s.nodeLossTolerationSeconds }}{{ $_ := set $c "node_loss_toleration_s" nil }}{{ else }}{{ $_ := set $c "node_loss_toleration_s" (int $s.nodeLossTolerationSeconds) }}{{ end -}}
{{- toPrettyJson $c -}}
{{- end -}}
