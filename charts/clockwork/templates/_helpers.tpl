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
{{- if not .Values.cassandra.auth.existingSecret }}
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
{{- end }}
{{- with include "clockwork.cassandraSecurityEnv" . }}
{{ . }}
{{- end }}
- name: CLOCKWORK_LOG_LEVEL
  value: {{ .Values.logLevel | quote }}
{{- end -}}

{{/* How every process that opens the store (api, workers, the migration Job) reaches a
secured Cassandra: TLS files mounted from cassandra.tls.existingSecret, and the login
from cassandra.auth.existingSecret (the release's own Secret does not exist yet when
the migration Job runs). */}}
{{- define "clockwork.cassandraSecurityEnv" -}}
{{- $c := .Values.cassandra -}}
{{- if and $c.auth.existingSecret (or $c.existingSecret $c.password $c.username) }}
{{- fail "cassandra.auth.existingSecret gives the username and the password: leave cassandra.username, cassandra.password and cassandra.existingSecret empty" }}
{{- end }}
{{- if $c.tls.existingSecret }}
- name: CLOCKWORK_CASSANDRA_TLS_CA
  value: /etc/clockwork/cassandra-tls/ca.crt
{{- if $c.tls.clientCertificate }}
- name: CLOCKWORK_CASSANDRA_TLS_CERT
  value: /etc/clockwork/cassandra-tls/tls.crt
- name: CLOCKWORK_CASSANDRA_TLS_KEY
  value: /etc/clockwork/cassandra-tls/tls.key
{{- end }}
{{- else if $c.tls.enabled }}
- name: CLOCKWORK_CASSANDRA_TLS
  value: "true"
{{- end }}
{{- if and (or $c.tls.existingSecret $c.tls.enabled) (not $c.tls.verifyHostname) }}
- name: CLOCKWORK_CASSANDRA_TLS_VERIFY_HOSTNAME
  value: "false"
{{- end }}
{{- with $c.auth.existingSecret }}
- name: CLOCKWORK_CASSANDRA_USER
  valueFrom:
    secretKeyRef:
      name: {{ . }}
      key: username
- name: CLOCKWORK_CASSANDRA_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ . }}
      key: password
{{- end }}
{{- end -}}

{{- define "clockwork.cassandraTlsMount" -}}
- {name: cassandra-tls, mountPath: /etc/clockwork/cassandra-tls, readOnly: true}
{{- end -}}

{{- define "clockwork.cassandraTlsVolume" -}}
- name: cassandra-tls
  secret:
    secretName: {{ .Values.cassandra.tls.existingSecret }}
    # Readable by the pod's group (fsGroup) only: the client key is in it.
    defaultMode: 0440
{{- end -}}

{{/* How the api and the workers reach a secured etcd: TLS files and the user. */}}
{{- define "clockwork.etcdSecurityEnv" -}}
{{- if .Values.etcd.tls.existingSecret }}
- name: CLOCKWORK_ETCD_TLS_CA
  value: /etc/clockwork/etcd-tls/ca.crt
{{- if .Values.etcd.tls.clientCertificate }}
- name: CLOCKWORK_ETCD_TLS_CERT
  value: /etc/clockwork/etcd-tls/tls.crt
- name: CLOCKWORK_ETCD_TLS_KEY
  value: /etc/clockwork/etcd-tls/tls.key
{{- end }}
{{- end }}
{{- with .Values.etcd.auth.existingSecret }}
- name: CLOCKWORK_ETCD_USER
  valueFrom:
    secretKeyRef:
      name: {{ . }}
      key: username
- name: CLOCKWORK_ETCD_PASSWORD
  valueFrom:
    secretKeyRef:
      name: {{ . }}
      key: password
{{- end }}
{{- end -}}

{{- define "clockwork.etcdTlsMount" -}}
- {name: etcd-tls, mountPath: /etc/clockwork/etcd-tls, readOnly: true}
{{- end -}}

{{- define "clockwork.etcdTlsVolume" -}}
- name: etcd-tls
  secret:
    secretName: {{ .Values.etcd.tls.existingSecret }}
    # Readable by the pod's group (fsGroup) only: the client key is in it.
    defaultMode: 0440
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
