# A message moved out of Junk by a person: train spamd with it as ham,
# unless it went to Trash (deleting spam says nothing about it being ham).
require ["vnd.dovecot.pipe", "copy", "imapsieve", "environment", "variables"];

if environment :matches "imap.mailbox" "*" {
  set "mailbox" "${1}";
}

if string "${mailbox}" "Trash" {
  stop;
}

if environment :matches "imap.user" "*" {
  set "username" "${1}";
}

pipe :copy "spamd-learn" [ "ham", "${username}" ];
