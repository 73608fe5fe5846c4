{{/* The objects' name: the release's, or <release>-dispatcher. */}}
{{- define "dispatcher.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* What selects this release's pods (server and migration alike). */}}
{{- define "dispatcher.selectorLabels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "dispatcher.labels" -}}
{{ include "dispatcher.selectorLabels" . }}
app.kubernetes.io/part-of: webhook-dispatcher
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}

{{- define "dispatcher.serverSelector" -}}
{{ include "dispatcher.selectorLabels" . }}
app.kubernetes.io/component: server
{{- end -}}

{{- define "dispatcher.image" -}}
{{- if .Values.image.digest -}}
{{ .Values.image.repository }}@{{ .Values.image.digest }}
{{- else -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}
{{- end -}}

{{- define "dispatcher.secretName" -}}
{{- .Values.secrets.existingSecret | default (include "dispatcher.fullname" .) -}}
{{- end -}}

{{/* The database URL, which both the server and the migration read. */}}
{{- define "dispatcher.databaseEnv" -}}
- name: DATABASE_URL
  valueFrom:
    secretKeyRef:
      name: {{ include "dispatcher.secretName" . }}
      key: database-url
{{- end -}}

{{- define "dispatcher.podSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
seccompProfile:
  type: RuntimeDefault
{{- end -}}

{{- define "dispatcher.containerSecurityContext" -}}
allowPrivilegeEscalation: false
readOnlyRootFilesystem: true
runAsNonRoot: true
capabilities:
  drop: ["ALL"]
{{- end -}}

{{/*
The Secret's keys mounted as files: master-keys and every role's tokens
(from a Secret of your own: all four; from the chart's: those given).
*/}}
{{- define "dispatcher.secretFiles" -}}
{{- $s := .Values.secrets -}}
{{- $keys := list "master-keys" -}}
{{- if or $s.existingSecret $s.publisherTokens }}{{ $keys = append $keys "publisher-tokens" }}{{ end -}}
{{- if or $s.existingSecret $s.adminTokens }}{{ $keys = append $keys "admin-tokens" }}{{ end -}}
{{- if or $s.existingSecret $s.operatorTokens }}{{ $keys = append $keys "operator-tokens" }}{{ end -}}
{{- toJson $keys -}}
{{- end -}}
