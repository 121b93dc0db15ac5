{{- define "clockwork.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "clockwork.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{- define "clockwork.selector" -}}
app.kubernetes.io/name: {{ .root.Chart.Name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "clockwork.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end -}}

{{- define "clockwork.secretName" -}}
{{- .Values.auth.existingSecret | default (printf "%s-auth" (include "clockwork.fullname" .)) -}}
{{- end -}}

{{- define "clockwork.apiAddress" -}}
{{ include "clockwork.fullname" . }}-api.{{ .Release.Namespace }}.svc:{{ .Values.api.port }}
{{- end -}}

{{/* Environment shared by every Clockwork process that talks to Cassandra. */}}
{{- define "clockwork.storeEnv" -}}
- name: CLOCKWORK_CASSANDRA
  value: {{ .Values.cassandra.contactPoints | quote }}
- name: CLOCKWORK_KEYSPACE
  value: {{ .Values.cassandra.keyspace | quote }}
- name: CLOCKWORK_CASSANDRA_DC
  value: {{ .Values.cassandra.localDc | quote }}
{{- with .Values.cassandra.username }}
- name: CLOCKWORK_CASSANDRA_USER
  value: {{ . | quote }}
{{- end }}
{{- if .Values.cassandra.existingSecret }}
- name: CLOCKWORK_CASSANDRA_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ .Values.cassandra.existingSecret }}
      key: password
{{- else if .Values.cassandra.password }}
- name: CLOCKWORK_CASSANDRA_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ include "clockwork.fullname" . }}-auth
      key: cassandra-password
{{- end }}
- name: CLOCKWORK_LOG_LEVEL
  value: {{ .Values.logLevel | quote }}
{{- end -}}

{{- define "clockwork.podSecurity" -}}
securityContext:
  runAsNonRoot: true
  runAsUser: 10001
  runAsGroup: 10001
  fsGroup: 10001
  seccompProfile:
    type: RuntimeDefault
{{- end -}}

{{- define "clockwork.containerSecurity" -}}
securityContext:
  allowPrivilegeEscalation: false
  readOnlyRootFilesystem: true
  capabilities:
    drop: [ALL]
{{- end -}}

{{- /* Rules the operator needs wherever ClockworkSchedules live. */}}
{{- define "clockwork.operatorScheduleRules" -}}
- apiGroups: [clockwork.io]
  resources: [clockworkschedules]
  verbs: [get, list, watch, patch, update]
- apiGroups: [clockwork.io]
  resources: [clockworkschedules/status]
  verbs: [get, patch, update]
# Tenant tokens referenced by spec.tenantSecretRef.
- apiGroups: [""]
  resources: [secrets]
  verbs: [get]
- apiGroups: [""]
  resources: [events]
  verbs: [create, patch]
- apiGroups: [events.k8s.io]
  resources: [events]
  verbs: [create, patch]
{{- end }}
